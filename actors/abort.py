"""Stopping the running visit of an aborted request (``revisit request abort``).

Aborting a request adds its id to the aborted set in Redis. While a worker
runs a request's visit, its process's watching thread (``actors.watch``)
polls that set; when the id shows up it raises ``VisitAborted`` in the
visit's thread, as Dramatiq's time limit raises its own exception: the loader
stops at its next Python instruction (a child process it runs is killed on
the way out: ``subprocess.run``, the archive's forked visits). A visit
blocked in one system call that outputs nothing stops when that call returns.

Polling keeps the one mechanism ``cancel`` already had (the set a worker
reads before a visit) and needs nothing from the broker: an aborted request
is an id in a set, read by whichever worker holds its message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dramatiq.middleware import Interrupt

from actors import watch
from queues.errors import Pipeline, Redis
from queues.workers import take_abort_on


class VisitAborted(Interrupt):
    """Raised in a visit's thread: its request was aborted."""


class Abort:
    """The abort of one request, watched while its visit runs."""

    def __init__(self, client: Redis, namespace: str, request_id: int) -> None:
        self.client = client
        self.namespace = namespace
        self.request_id = request_id
        #: Interrupts the visit once its request is aborted.
        self.wire = watch.Tripwire(VisitAborted)

    def ask(self, pipe: Pipeline) -> int:
        """Take the request's abort, if any (``watch.Watched``)."""
        take_abort_on(pipe, self.namespace, self.request_id)
        return 1

    def hear(self, replies: list[Any], sent: float) -> bool:
        """Interrupt the visit if its request was aborted (``watch.Watched``)."""
        if replies[0]:
            self.wire.trip()
            return False
        return True


@contextmanager
def abort_watch(client: Redis, namespace: str, request_id: int) -> Iterator[None]:
    """Within the block, the visit of ``request_id`` is interrupted with
    ``VisitAborted`` once its id is in the aborted set (taken out of it)."""
    abort = Abort(client, namespace, request_id)
    watch.WATCHER.add(abort)
    try:
        with abort.wire.interrupting():
            yield
    finally:
        watch.WATCHER.remove(abort)
