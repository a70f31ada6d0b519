"""Stopping the running visit of an aborted request (``revisit request abort``).

Aborting a request adds its id to the aborted set in Redis. While a worker
runs a request's visit, a watcher thread polls that set; when the id shows
up it raises ``VisitAborted`` in the visit's thread, as Dramatiq's time limit
raises its own exception: the loader stops at its next Python instruction (a
child process it runs is killed on the way out: ``subprocess.run``, the
archive's forked visits). A visit blocked in one system call that outputs
nothing stops when that call returns.

Polling keeps the one mechanism ``cancel`` already had (the set a worker
reads before a visit) and needs nothing from the broker: an aborted request
is an id in a set, read by whichever worker holds its message.
"""

from __future__ import annotations

import threading
from types import TracebackType

from dramatiq.middleware import Interrupt, raise_thread_exception

from queues.errors import Redis, RedisError
from queues.workers import take_abort

#: How often a running request's visit looks for its abort.
POLL_S = 0.5


class VisitAborted(Interrupt):
    """Raised in a visit's thread: its request was aborted."""


class AbortWatch:
    """Within the block, the visit of ``request_id`` is interrupted with
    ``VisitAborted`` once its id is in the aborted set (taken out of it)."""

    def __init__(self, client: Redis, namespace: str, request_id: int) -> None:
        self._client = client
        self._namespace = namespace
        self._request_id = request_id
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._armed = False
        self._thread_id = 0
        self._watcher = threading.Thread(
            target=self._watch, name=f"abort-watch-{request_id}", daemon=True
        )

    def __enter__(self) -> AbortWatch:
        self._thread_id = threading.get_ident()
        self._armed = True
        self._watcher.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Disarmed under the lock: an interrupt raised before lands here at the
        # latest, inside the caller's ``except VisitAborted``; none comes after.
        with self._lock:
            self._armed = False
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                hit = take_abort(self._client, self._namespace, self._request_id)
            except RedisError:
                continue  # Redis away: the visit goes on, the next poll retries
            if hit:
                with self._lock:
                    if self._armed:
                        raise_thread_exception(self._thread_id, VisitAborted)  # type: ignore[no-untyped-call]
                return
