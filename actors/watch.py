"""Interrupting a running visit from another thread when Redis says so.

Used for a request's abort (``actors.abort``, a ``Watch`` per visit) and for the
claim that keeps two visits of one origin from running at once
(``actors.visiting``, whose claims one thread per worker process renews). The
interrupt is raised as Dramatiq's time limit raises its own exception: the
loader stops at its next Python instruction (a child process it runs is killed
on the way out: ``subprocess.run``, the archive's forked visits).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dramatiq.middleware import Interrupt, raise_thread_exception


class Tripwire:
    """Once ``trip`` is called, raises ``interrupt`` in the thread inside an
    ``interrupting`` block (at once in one that enters it later)."""

    def __init__(self, interrupt: type[Interrupt]) -> None:
        self._interrupt = interrupt
        self._lock = threading.Lock()
        self._target: int | None = None
        self.tripped = False
        """Whether ``trip`` has been called."""

    def trip(self) -> None:
        """Interrupt the thread inside the ``interrupting`` block, if any, and
        any that enters one from now on."""
        with self._lock:
            self.tripped = True
            if self._target is not None:
                raise_thread_exception(self._target, self._interrupt)  # type: ignore[no-untyped-call]

    @contextmanager
    def interrupting(self) -> Iterator[None]:
        """Within the block, the calling thread is interrupted once tripped (at
        once if it has been already)."""
        with self._lock:
            if self.tripped:
                raise self._interrupt
            self._target = threading.get_ident()
        try:
            yield
        finally:
            # Disarmed under the lock: an interrupt raised before lands here at
            # the latest, inside the caller's ``except``; none comes after.
            with self._lock:
                self._target = None


class Watch(Tripwire):
    """Calls ``poll`` every ``every_s`` from ``start`` to ``stop``, in a daemon
    thread; the first time it returns True the thread ends and trips the wire."""

    def __init__(
        self, poll: Callable[[], bool], every_s: float, interrupt: type[Interrupt], name: str
    ) -> None:
        super().__init__(interrupt)
        self._poll = poll
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self, *, wait: bool = False) -> None:
        """Stop polling, after the poll under way; ``wait`` for that poll to end."""
        self._stop.set()
        if wait and self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            if self._poll():
                self.trip()
                return
