"""Several copies of one process under a parent that stands for them all.

``revisit journal --processes N`` runs N journal clients in one consumer
group. Each is an interpreter of its own, started with ``python -m actors``
(fork and exec: no Kafka client, connection or thread crosses a fork), and
the parent behaves as one process to the process manager above it (honcho,
systemd):

- SIGTERM or SIGINT is forwarded to every child, and the parent waits for
  them to leave the group cleanly (at most ``STOP_GRACE_S``, then SIGKILL);
- a child that exits when it was not told to (a crash, the OOM killer, an
  operator's kill -9) stops the others and the parent exits non-zero, so the
  manager sees the failure and restarts the whole group, rather than the
  group going on at reduced capacity unseen;
- the children are left in the parent's process group, so a manager that
  signals the group reaches them too, and each stops by itself if the parent
  dies (``watch_parent``).

The exit code is 0 only if the parent was told to stop and every child then
exited 0 (or by that signal, if it came before the child could handle it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from app.loaders.zygote import die_with_parent

log = logging.getLogger("revisit.supervisor")

#: How long the children may take to stop once told (the journal client's
#: in-flight batch and leaving its group take seconds) before they are killed.
STOP_GRACE_S = 30.0
#: How often the parent looks at its children.
POLL_S = 0.2


class Supervisor:
    """Runs ``copies`` children ``argv`` (environment ``env``) until told to stop or
    one of them exits."""

    def __init__(
        self,
        argv: list[str],
        copies: int,
        env: dict[str, str],
        on_exit: Callable[[int], None] = lambda pid: None,
        grace_s: float = STOP_GRACE_S,
    ) -> None:
        """``on_exit(pid)`` is called once a child has exited (the metrics of a dead
        process are dropped there)."""
        if copies < 1:
            raise ValueError(f"copies must be at least 1, not {copies}")
        self.argv, self.copies, self.env = argv, copies, env
        self.on_exit, self.grace_s = on_exit, grace_s
        self.children: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._signal: int | None = None

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Tell the children to stop with ``signum`` (a signal handler's call)."""
        if self._signal is None:
            self._signal = signum
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """Forward SIGTERM and SIGINT to the children."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda received, _frame: self.stop(received))

    def run(self) -> int:
        """Start the children and supervise them; the exit code for the parent."""
        for _ in range(self.copies):
            if self._stop.is_set():
                break
            self.children.append(subprocess.Popen(self.argv, env=self.env))
        log.info("started processes %s", ", ".join(str(c.pid) for c in self.children))
        failed = self._wait_for_stop_or_exit()
        self._signal_all(self._signal or signal.SIGTERM)
        failed |= not self._wait_all(self.grace_s)
        if failed or self._signal is None:
            return 1
        return 0

    def _wait_for_stop_or_exit(self) -> bool:
        """Wait until told to stop or a child exits; whether a child failed."""
        while not self._stop.wait(POLL_S):
            for child in self.children:
                code = child.poll()
                if code is None:
                    continue
                self.on_exit(child.pid)
                if self._stop.is_set():  # told to stop meanwhile (a group signal)
                    return not self._stopped_cleanly(code)
                log.error(
                    "process %d exited (%s) unbidden: stopping the others",
                    child.pid,
                    _describe(code),
                )
                return True
        return False

    def _signal_all(self, signum: int) -> None:
        for child in self.children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)

    def _wait_all(self, timeout_s: float) -> bool:
        """Wait for every child to exit, killing those still there after
        ``timeout_s``; whether they all exited 0."""
        deadline = time.monotonic() + timeout_s
        clean = True
        for child in self.children:
            already = child.returncode is not None
            try:
                code = child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("process %d did not stop within %.0fs: killed", child.pid, timeout_s)
                child.kill()
                code = child.wait()
            if not already:
                self.on_exit(child.pid)
                if not self._stopped_cleanly(code):
                    log.error("process %d exited (%s)", child.pid, _describe(code))
            clean = clean and self._stopped_cleanly(code)
        return clean

    def _stopped_cleanly(self, code: int) -> bool:
        """Exited 0, or by the stop signal itself (told to stop while it started,
        before its handler was set)."""
        return code == 0 or (self._signal is not None and code == -self._signal)


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"code {code}"


def watch_parent() -> None:
    """Have this process told to stop (SIGTERM) if its parent dies: a child whose
    supervisor was killed -9 leaves its group rather than consuming on, unseen,
    beside the group its restarted supervisor starts."""
    die_with_parent(signal.SIGTERM, os.getppid())
