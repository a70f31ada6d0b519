"""A fork server ("zygote"): one per worker process, it imports the archive's
loaders once and forks a child per visit, so a visit does not pay their import.

The worker side (``ForkServer``) starts the zygote lazily, a fresh interpreter
(``python -m app.loaders.archive zygote FD``: forking the worker itself would
copy its Dramatiq threads' locks), and talks to it over a ``SOCK_SEQPACKET``
socket pair. Each ``spawn`` sends one message: the command and request as JSON
and, as ``SCM_RIGHTS``, three descriptors: a socket the zygote answers on (the
child's pid, then its exit code), and the write ends of the child's stdout and
stderr pipes. The child runs in its own session, so its whole process group is
killed at once:

- the worker closes its end of the visit's socket (``Forked.kill``, or the
  thread leaves the block at Dramatiq's time limit): the zygote kills the
  child's group; it alone reaps its children, so it never signals a reused pid;
- a child's group is killed when the child exits too (what it left running);
- ``stop_children`` (the worker shutting down) kills every running child;
- the worker process dies: its end of the socket pair closes, the zygote kills
  every child and exits; a zygote that dies is started again by the next
  ``spawn``, and its children die with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

#: Largest request message (the loader arguments are at most 16 KiB of JSON).
MAX_MESSAGE_BYTES = 1 << 20
#: Longest wait for a killed child's pipes to close.
KILL_WAIT_S = 10.0
_PR_SET_PDEATHSIG = 1

#: What the child runs: ``run(command, request, report)``.
Runner = Callable[[str, dict[str, Any], IO[str]], None]


class ShuttingDown(RuntimeError):
    """The worker is shutting down: no new visit starts."""


class ZygoteGone(RuntimeError):
    """The fork server could not be reached."""


class Forked:
    """A child forked by the zygote, as the worker sees it: its pid, output and exit code."""

    def __init__(self, conn: socket.socket, out: int, err: int) -> None:
        self._conn: socket.socket | None = conn
        self._status = b""
        self._out = bytearray()
        self._err = bytearray()
        self._selector = selectors.DefaultSelector()
        self._selector.register(conn, selectors.EVENT_READ, "status")
        self._selector.register(out, selectors.EVENT_READ, self._out)
        self._selector.register(err, selectors.EVENT_READ, self._err)
        self.pid: int | None = None
        self.returncode: int | None = None

    def communicate(self, timeout: float) -> tuple[str, str]:
        """Its stdout and stderr once it exited and closed them; ``TimeoutExpired``
        after ``timeout`` seconds (call again to go on waiting)."""
        deadline = time.monotonic() + timeout
        while self._selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("the archive's loader", timeout)
            for key, _ in self._selector.select(left):
                self._read(key)
        return self._out.decode(errors="replace"), self._err.decode(errors="replace")

    def _read(self, key: selectors.SelectorKey) -> None:
        if key.data == "status":
            assert self._conn is not None
            data = self._conn.recv(64)
            self._status += data
            lines = self._status.split(b"\n")
            if len(lines) > 1 and self.pid is None:
                self.pid = int(lines[0])
            if len(lines) > 2:
                self.returncode = int(lines[1])
            if not data or self.returncode is not None:
                self._selector.unregister(key.fileobj)
                if self.returncode is None:  # the zygote died with it
                    self.returncode = -int(signal.SIGKILL)
            return
        data = os.read(key.fd, 65536)
        if data:
            key.data.extend(data)
        else:
            self._selector.unregister(key.fd)
            os.close(key.fd)

    def kill(self) -> None:
        """Have the zygote kill its process group (it does when the socket closes)."""
        if self._conn is not None and self.returncode is None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._conn)
            self._conn.close()
            self._conn = None
            if self.returncode is None:
                self.returncode = -int(signal.SIGKILL)

    def close(self) -> None:
        """Kill it if it still runs; release the pipes and the socket."""
        self.kill()
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fileobj)
            if isinstance(key.fileobj, int):
                os.close(key.fileobj)
        self._selector.close()
        if self._conn is not None:
            self._conn.close()


class ForkServer:
    """The worker side: starts the zygote (``argv`` + its socket's fd) when first
    needed, and again if it died; safe to call from several threads."""

    def __init__(self, argv: list[str]) -> None:
        self._argv = argv
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._owner = 0
        self.stopping = False

    def spawn(self, command: str, request: str, *, when_stopping: bool = False) -> Forked:
        """A child running ``command`` on ``request`` (JSON). Refused once the
        worker is stopping, unless ``when_stopping`` (closing a visit)."""
        if self.stopping and not when_stopping:
            raise ShuttingDown("the worker is shutting down")
        message = json.dumps({"command": command, "request": request}).encode()
        for attempt in (1, 2):
            ours, theirs = socket.socketpair()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            process = None
            try:
                control, process = self._ensure()
                fds = array.array("i", [theirs.fileno(), out_w, err_w])
                control.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            except OSError as exc:
                ours.close()
                os.close(out_r)
                os.close(err_r)
                if attempt == 2 or not isinstance(exc, ConnectionError):
                    raise ZygoteGone(f"the archive's loaders' fork server: {exc}") from exc
                self._forget(process)  # it died: start another
                continue
            finally:
                theirs.close()
                os.close(out_w)
                os.close(err_w)
            return Forked(ours, out_r, err_r)
        raise AssertionError("unreachable")

    def stop_children(self) -> None:
        """Kill every running child's process group, and start no visit from now on."""
        self.stopping = True
        with self._lock:
            if self._control is not None and self._owner == os.getpid():
                with contextlib.suppress(OSError):
                    self._control.send(b"stop")

    def close(self) -> None:
        """End the zygote (it kills its children) and wait for it."""
        with self._lock:
            if self._control is not None:
                self._control.close()
                self._control = None
            if self._process is not None:
                self._process.wait()
                self._process = None

    def pid(self) -> int | None:
        """The zygote's pid, if one runs."""
        with self._lock:
            alive = self._process is not None and self._process.poll() is None
            return self._process.pid if alive and self._process is not None else None

    def _ensure(self) -> tuple[socket.socket, subprocess.Popen[bytes]]:
        with self._lock:
            alive = self._process is not None and self._process.poll() is None
            if self._control is None or not alive or self._owner != os.getpid():
                self._start()
            assert self._control is not None and self._process is not None
            return self._control, self._process

    def _start(self) -> None:
        if self._control is not None:
            self._control.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [*self._argv, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours
        self._owner = os.getpid()

    def _forget(self, process: subprocess.Popen[bytes] | None) -> None:
        """Have the next spawn start a zygote in place of ``process`` (not one
        another thread started since)."""
        with self._lock:
            if process is None or process is not self._process:
                return
            if process.poll() is None:
                process.kill()
            process.wait()
            self._process = None


# The zygote's side.


def serve(control_fd: int, preload: Callable[[], None], run: Runner) -> int:
    """The zygote: ``preload`` (imports), then fork a child per request until the
    worker's end of ``control_fd`` closes; kill every child then."""
    # Its life is the worker's: it leaves when the worker's socket closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    preload()
    gc.freeze()  # keep the imported objects' pages shared with the children
    control = socket.socket(fileno=control_fd)
    server = _Zygote(control, run)
    return server.loop()


class _Zygote:
    def __init__(self, control: socket.socket, run: Runner) -> None:
        self.control = control
        self.run = run
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, "control")
        #: pid -> (pidfd, the worker's socket or None once it closed)
        self.children: dict[int, tuple[int, socket.socket | None]] = {}

    def loop(self) -> int:
        while True:
            for key, _ in self.selector.select():
                if key.data == "control":
                    if not self._request():
                        self._kill_all()
                        return 0
                elif key.data[0] == "exited":
                    self._reap(key.data[1])
                else:
                    self._closed(key.data[1])

    def _request(self) -> bool:
        fds = array.array("i")
        try:
            message, ancillary, _, _ = self.control.recvmsg(
                MAX_MESSAGE_BYTES, socket.CMSG_SPACE(3 * fds.itemsize)
            )
        except ConnectionResetError:
            return False
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        if not message:
            return False
        if message == b"stop":
            self._kill_all()
            return True
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            return True
        conn = socket.socket(fileno=fds[0])
        request = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._child(conn, fds[1], fds[2], request)
        os.close(fds[1])
        os.close(fds[2])
        with contextlib.suppress(OSError):
            conn.sendall(f"{pid}\n".encode())
        pidfd = os.pidfd_open(pid)
        self.selector.register(pidfd, selectors.EVENT_READ, ("exited", pid))
        self.selector.register(conn, selectors.EVENT_READ, ("closed", pid))
        self.children[pid] = (pidfd, conn)
        return True

    def _child(self, conn: socket.socket, out: int, err: int, request: dict[str, Any]) -> None:
        code = 1
        try:
            os.setsid()
            die_with_parent()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self.selector.close()
            self.control.close()
            conn.close()
            for pidfd, other in self.children.values():
                os.close(pidfd)
                if other is not None:
                    other.close()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            # The loaders print: stdout and stderr both go to the err pipe.
            os.dup2(err, 1)
            os.dup2(err, 2)
            os.close(err)
            report = os.fdopen(out, "w")
            self.run(request["command"], json.loads(request["request"]), report)
            report.flush()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            # No atexit: the zygote's handlers are not the child's (svn's kills its group).
            os._exit(code)

    def _reap(self, pid: int) -> None:
        pidfd, conn = self.children.pop(pid)
        _killpg(pid)  # what it left running in its group (its pid is not reaped yet)
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            self.selector.unregister(conn)
            conn.close()

    def _closed(self, pid: int) -> None:
        pidfd, conn = self.children[pid]
        _killpg(pid)
        if conn is not None:
            self.selector.unregister(conn)
            conn.close()
        self.children[pid] = (pidfd, None)

    def _kill_all(self) -> None:
        for pid in list(self.children):
            _killpg(pid)


def _killpg(pid: int) -> None:
    """Kill child ``pid`` (not reaped yet, so its pid is not reused) and its process
    group. A child killed before its ``setsid`` has no group yet, nor anything
    started: the worker may give up on it before the zygote even forked it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def dying_with_this_process(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen`` (this thread's): the child started
    is sent ``signum`` when this process dies (Linux's PR_SET_PDEATHSIG; elsewhere
    nothing), at once if it died already. libc is loaded here, so the child, between
    fork and exec, only calls prctl and getppid. The kernel sends it when the
    thread that started the child ends: start children from a lasting thread."""
    try:
        prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    parent = os.getpid()

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return preexec


def die_with_parent(signum: int = signal.SIGKILL, parent_pid: int | None = None) -> None:
    """Have the kernel send ``signum`` to this process when its parent dies (Linux;
    elsewhere nothing): a zygote's children, a Dramatiq pool's processes. Sent at
    once if the parent, ``parent_pid``, died already."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)
