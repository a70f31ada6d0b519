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

from collections.abc import Iterator
from contextlib import contextmanager

from dramatiq.middleware import Interrupt

from actors.watch import Watch
from queues.errors import Redis, RedisError
from queues.workers import take_abort

#: How often a running request's visit looks for its abort.
POLL_S = 0.5


class VisitAborted(Interrupt):
    """Raised in a visit's thread: its request was aborted."""


@contextmanager
def abort_watch(client: Redis, namespace: str, request_id: int) -> Iterator[None]:
    """Within the block, the visit of ``request_id`` is interrupted with
    ``VisitAborted`` once its id is in the aborted set (taken out of it)."""

    def aborted() -> bool:
        try:
            return take_abort(client, namespace, request_id)
        except RedisError:
            return False  # Redis away: the visit goes on, the next poll retries

    watch = Watch(aborted, POLL_S, VisitAborted, f"abort-watch-{request_id}")
    watch.start()
    try:
        with watch.interrupting():
            yield
    finally:
        watch.stop()
