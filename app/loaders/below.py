"""A process's connections, and those of every program it starts, held below it.

The check of ``app.loaders.outbound`` sees the sockets Python opens; C libraries
(Subversion's, through subvertpy) and the programs a loader starts (``svnrdump``,
``git``) connect by themselves. Here a seccomp filter (Linux, x86_64 and
aarch64) sends every ``connect(2)`` of the thread that puts it in place, of the
threads it starts later and of every program they run, and every ``sendto``,
``sendmsg`` and ``sendmmsg`` that names an address, to a supervisor: the
process that asks to be held forks, becomes the supervisor and waits, while
its child goes on held (an ancestor may read its descendants' memory where
Yama restricts it). The supervisor reads the address from the caller's
memory and lets the call go on when ``check(host, port)`` accepts it; when
``check`` raises ValueError the call fails with EACCES before any packet leaves,
and the refusal's text comes back to the held process (``Held.refused``).
``io_uring``, which could connect around the filter, is refused (ENOSYS).

The supervisor reads the address, then the kernel goes on with the call: a
thread of the held process that rewrote the address in between would connect
elsewhere (the caveat of ``SECCOMP_USER_NOTIF_FLAG_CONTINUE``). That holds
against what the network answers (a redirect, a second DNS answer, an external
on another host), not against the held process's own code, which is the
loader's (nor, for the same reason, its SCTP ``connectx`` socket options).
Threads running before ``start`` are not held (in a visit's child, the
Subversion proxy's, which checks what it connects to itself). The loader's own
services are held like the rest: one reached at an internal address its
configuration does not name (a Kafka broker advertised under another name)
needs REVISIT_ALLOWED_INTERNAL_HOSTS.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import json
import logging
import os
import platform
import select
import signal
import socket
import struct
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import NoReturn

#: Refuses (ValueError, its text the reason) a connection to ``host`` (an address) at ``port``.
Check = Callable[[str, int], None]

log = logging.getLogger("revisit.loaders.below")

# seccomp(2), its user notifications (linux/seccomp.h) and classic BPF (linux/filter.h).
_SET_MODE_FILTER = 1
_FLAG_NEW_LISTENER = 1 << 3
_RET_ALLOW = 0x7FFF0000
_RET_USER_NOTIF = 0x7FC00000
_RET_ENOSYS = 0x00050000 | errno.ENOSYS
_NOTIF_RECV = 0xC0502100  # _IOWR('!', 0, struct seccomp_notif), 80 bytes
_NOTIF_SEND = 0xC0182101  # _IOWR('!', 1, struct seccomp_notif_resp), 24 bytes
_NOTIF_ID_VALID = 0x40082102  # _IOW('!', 2, __u64)
_NOTIF_ID_VALID_BEFORE_5_9 = 0x80082102  # _IOR, as kernels before 5.9 name it
_FLAG_CONTINUE = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
#: pidfd_getfd(2), the same number on every architecture.
_SYS_PIDFD_GETFD = 438
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
#: x86_64 syscall numbers from here on are the x32 ABI's.
_X32_BIT = 0x40000000
#: Most addresses ``sendmmsg`` may name in one call (UIO_MAXIOV).
_MAX_MESSAGES = 1024
_SOCKADDR_MAX = 128
_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class _Arch:
    audit: int
    seccomp: int
    connect: int
    sendto: int
    sendmsg: int
    sendmmsg: int
    io_uring_setup: int
    x32: bool


_ARCHES = {
    "x86_64": _Arch(0xC000003E, 317, 42, 44, 46, 307, 425, x32=True),
    "aarch64": _Arch(0xC00000B7, 277, 203, 206, 211, 269, 425, x32=False),
}


class Held:
    """The held process's end. Making it forks: this process becomes the supervisor
    (an ancestor of every task it reads: Yama lets ancestors read their
    descendants), waits for its child, the held process, and exits with its exit
    code; the child returns from here and goes on (make it before starting
    threads). ``start`` puts the filter in place; the held process dies with its
    supervisor."""

    def __init__(self, check: Check) -> None:
        self._arch = arch = _ARCHES.get(platform.machine())
        self._sock: socket.socket | None = None
        self._received = b""
        if arch is None:
            return
        ours, theirs = socket.socketpair()
        supervisor = os.getpid()
        pid = os.fork()
        if pid != 0:
            probe = ours.fileno()  # the child's end, open there till the handshake
            ours.close()
            _supervisor(theirs, pid, probe, check, arch)
        theirs.close()
        self._sock = ours
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != supervisor:
            os._exit(1)  # the supervisor died before the death signal was set

    def start(self, also: Iterable[tuple[str, int]] = ()) -> bool:
        """Hold this thread, the threads it starts and the programs they run;
        ``also`` lists the (address, port) pairs let through unchecked. False
        (with a warning) where the kernel, the machine or the sandbox cannot."""
        sock, arch = self._sock, self._arch
        if sock is None or arch is None:
            machine = platform.machine()
            log.warning("connections made from C are not held: no filter for %s", machine)
            return False
        probe = _line(sock)  # whether the supervisor may read this process
        listener = -1
        try:
            if probe != "ok":
                raise OSError(errno.EPERM, probe or "the connection supervisor is gone")
            listener = _install(arch)
        except OSError as exc:
            sock.close()
            self._sock = None
            log.warning("connections made from C are not held: %s", exc)
            return False
        try:  # send, not sendmsg: the filter would hold a sendmsg for the supervisor
            pairs = sorted({(str(host), int(port)) for host, port in also})
            sock.sendall(json.dumps({"listener": listener, "also": pairs}).encode() + b"\n")
            if (answer := _line(sock)) != "ok":  # the supervisor took its copy
                raise OSError(f"the connection supervisor failed: {answer or 'gone'}")
        finally:
            os.close(listener)
        return True

    def refused(self) -> list[str]:
        """The reasons of the connections refused so far."""
        if self._sock is None:
            return []
        with suppress(BlockingIOError, InterruptedError):
            while chunk := self._sock.recv(1 << 16, socket.MSG_DONTWAIT):
                self._received += chunk
        return [line.decode(errors="replace") for line in self._received.splitlines() if line]


def nameservers(path: str = "/etc/resolv.conf") -> list[tuple[str, int]]:
    """The resolver's servers (port 53): the C library's DNS goes there."""
    found: list[tuple[str, int]] = []
    with suppress(OSError), open(path, encoding="utf-8", errors="replace") as text:
        for line in text:
            words = line.split()
            if len(words) >= 2 and words[0] == "nameserver":
                found.append((words[1].partition("%")[0], 53))
    return found


def _program(arch: _Arch) -> bytes:
    """The filter: connect, sendmsg and sendmmsg to the supervisor, sendto when it
    names an address, io_uring and foreign ABIs refused, the rest allowed."""
    code: list[tuple[int, int, str | None, str | None]] = []
    labels: dict[str, int] = {}

    def op(kind: int, k: int, yes: str | None = None, no: str | None = None) -> None:
        code.append((kind, k, yes, no))

    op(_LD_W_ABS, 4)  # seccomp_data.arch
    op(_JEQ_K, arch.audit, None, "nosys")
    op(_LD_W_ABS, 0)  # seccomp_data.nr
    if arch.x32:
        op(_JGE_K, _X32_BIT, "nosys", None)
    for nr in (arch.connect, arch.sendmsg, arch.sendmmsg):
        op(_JEQ_K, nr, "notify", None)
    op(_JEQ_K, arch.io_uring_setup, "nosys", None)
    op(_JEQ_K, arch.sendto, None, "allow")
    op(_LD_W_ABS, 16 + 8 * 4)  # args[4], sendto's address: low half
    op(_JEQ_K, 0, None, "notify")
    op(_LD_W_ABS, 16 + 8 * 4 + 4)  # its high half
    op(_JEQ_K, 0, "allow", "notify")
    returns = (("allow", _RET_ALLOW), ("notify", _RET_USER_NOTIF), ("nosys", _RET_ENOSYS))
    for label, value in returns:
        labels[label] = len(code)
        op(_RET_K, value)

    def offset(at: int, label: str | None) -> int:
        return 0 if label is None else labels[label] - at - 1

    return b"".join(
        struct.pack("=HBBI", kind, offset(at, yes), offset(at, no), k & 0xFFFFFFFF)
        for at, (kind, k, yes, no) in enumerate(code)
    )


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, its ``syscall`` returning a long, errno kept."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _install(arch: _Arch) -> int:
    """Put the filter in place on this thread: its listener's file descriptor."""
    libc = _libc()
    program = _program(arch)
    instructions = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer(
        struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(instructions))
    )
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    fd = int(libc.syscall(arch.seccomp, _SET_MODE_FILTER, _FLAG_NEW_LISTENER, fprog))
    if fd < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"seccomp: {os.strerror(number)}")
    return fd


def _supervisor(sock: socket.socket, held: int, probe: int, check: Check, arch: _Arch) -> NoReturn:
    """This process as the supervisor of its child ``held``: answer the held
    tasks' calls until none is left, then exit with the child's exit code."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        keep = sock.fileno()
        os.closerange(3, keep)  # hold none of the visit's pipes open
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            _supervise(sock, held, probe, check, arch)
        except Exception as exc:  # closing the listener fails every held call
            with suppress(OSError):
                sock.sendall(f"the connection supervisor failed: {exc}\n".encode())
        sock.close()
        code = os.waitstatus_to_exitcode(os.waitpid(held, 0)[1])
        code = code if code >= 0 else 128 - code
    finally:
        os._exit(code)


def _supervise(sock: socket.socket, held: int, probe: int, check: Check, arch: _Arch) -> None:
    """Answer the held tasks' calls until none is left (``probe``: a file
    descriptor the held process has open, to try reading it with)."""
    try:  # what Yama, the sandbox or the kernel let this process do to its child
        with open(f"/proc/{held}/mem", "rb"):
            pass
        os.close(_take_fd(held, probe))
    except OSError as exc:
        sock.sendall(f"the connection supervisor cannot read its child: {exc}\n".encode())
        return
    sock.sendall(b"ok\n")
    message = _line(sock)
    if not message:
        return  # the held process went on without the filter
    sent = json.loads(message)
    listener = _take_fd(held, int(sent["listener"]))
    sock.sendall(b"ok\n")
    also = {(str(host), int(port)) for host, port in sent["also"]}
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    while any(event & select.POLLIN for _, event in poller.poll()):
        notification = bytearray(80)
        try:
            fcntl.ioctl(listener, _NOTIF_RECV, notification)
        except OSError:
            continue  # the caller is gone
        nid, pid = struct.unpack_from("=QI", notification)
        nr = struct.unpack_from("=i", notification, 16)[0]
        args = struct.unpack_from("=6Q", notification, 32)
        refusal = _judge(arch, pid, nr, args, check, also)
        if not _still_waiting(listener, nid):
            continue  # read from a task that is gone: the pid may be another's now
        if refusal is not None:
            with suppress(OSError):
                sock.send(refusal.encode(errors="replace")[:4000] + b"\n", socket.MSG_DONTWAIT)
        response = struct.pack(
            "=QqiI",
            nid,
            0,
            -errno.EACCES if refusal is not None else 0,
            0 if refusal is not None else _FLAG_CONTINUE,
        )
        with suppress(OSError):
            fcntl.ioctl(listener, _NOTIF_SEND, response)
    os.close(listener)


def _line(sock: socket.socket) -> str:
    """The next line from ``sock``, "" at its end (lines are small, one at a time)."""
    received = b""
    while not received.endswith(b"\n"):
        try:
            chunk = sock.recv(1)
        except OSError:
            return ""
        if not chunk:
            return ""
        received += chunk
    return received[:-1].decode(errors="replace")


def _take_fd(pid: int, fd: int) -> int:
    """A copy of process ``pid``'s file descriptor ``fd`` (pidfd_getfd)."""
    libc = _libc()
    pidfd = os.pidfd_open(pid)
    try:
        copy = int(libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0))
    finally:
        os.close(pidfd)
    if copy < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"pidfd_getfd: {os.strerror(number)}")
    return copy


def _still_waiting(listener: int, nid: int) -> bool:
    """Whether the call ``nid`` still waits for its answer (its task alive)."""
    for request in (_NOTIF_ID_VALID, _NOTIF_ID_VALID_BEFORE_5_9):
        try:
            fcntl.ioctl(listener, request, struct.pack("=Q", nid))
        except OSError as exc:
            if exc.errno != errno.ENOTTY:
                return False
        else:
            return True
    return True  # no such check here: the answer itself fails for a task gone


def _judge(
    arch: _Arch, pid: int, nr: int, args: tuple[int, ...], check: Check, also: set[tuple[str, int]]
) -> str | None:
    """None to let the call go on, else why it is refused."""
    try:
        sending = nr != arch.connect
        raw_addresses = _addresses(arch, pid, nr, args)
        targets = [t for raw in raw_addresses if (t := _inet(raw, sending)) is not None]
    except OSError as exc:
        return f"connection refused: its address could not be read ({exc})"
    for host, port in targets:
        if (host, port) in also:
            continue
        try:
            check(host, port)
        except Exception as exc:  # a rule that failed refuses, naming why
            return str(exc) if isinstance(exc, ValueError) else f"connection refused: {exc!r}"
    return None


def _addresses(arch: _Arch, pid: int, nr: int, args: tuple[int, ...]) -> list[bytes]:
    """The socket addresses the call names, read from the caller's memory."""
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:

        def read(at: int, size: int) -> bytes:
            return os.pread(fd, size, at) if at and size > 0 else b""

        if nr == arch.connect:  # socklen_t and unsigned int: 32 bits of their registers
            return [read(args[1], min(args[2] & _U32, _SOCKADDR_MAX))]
        if nr == arch.sendto:
            return [read(args[4], min(args[5] & _U32, _SOCKADDR_MAX))]
        if nr == arch.sendmsg:
            headers = [read(args[1], 16)]
        elif nr == arch.sendmmsg:
            count = min(args[2] & _U32, _MAX_MESSAGES)
            headers = [read(args[1] + 64 * k, 16) for k in range(count)]
        else:
            return []
        names = []
        for header in headers:  # struct msghdr: msg_name, msg_namelen
            if len(header) == 16:
                at, size = struct.unpack_from("=QI", header)
                names.append(read(at, min(size, _SOCKADDR_MAX)))
        return names
    finally:
        os.close(fd)


def _inet(raw: bytes, sending: bool) -> tuple[str, int] | None:
    """(address, port) of an IPv4 or IPv6 socket address, None for another family.
    A datagram sent to an ``AF_UNSPEC`` address goes to its IPv4 address."""
    if len(raw) < 2:
        return None
    family = struct.unpack_from("=H", raw)[0]
    if (family == socket.AF_INET or (sending and family == socket.AF_UNSPEC)) and len(raw) >= 8:
        return socket.inet_ntop(socket.AF_INET, raw[4:8]), struct.unpack_from(">H", raw, 2)[0]
    if family == socket.AF_INET6 and len(raw) >= 24:
        port = struct.unpack_from(">H", raw, 2)[0]
        if raw[8:20] == b"\0" * 10 + b"\xff\xff":  # IPv4-mapped: the IPv4 address it reaches
            return socket.inet_ntop(socket.AF_INET, raw[20:24]), port
        return socket.inet_ntop(socket.AF_INET6, raw[8:24]), port
    return None
