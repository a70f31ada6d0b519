"""Interrupting a running visit from another thread when Redis says so.

What a running visit watches in Redis, its origin's claim (``actors.visiting``)
and its request's abort (``actors.abort``), one thread per worker process
polls (``WATCHER``), in one round trip per Redis client. When Redis says stop,
the visit's ``Tripwire`` raises its interrupt as Dramatiq's time limit raises
its own exception: the loader stops at its next Python instruction (a child
process it runs is killed on the way out: ``subprocess.run``, the archive's
forked visits).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from dramatiq.middleware import Interrupt, raise_thread_exception

from queues.errors import Pipeline, Redis, RedisError

log = logging.getLogger("revisit.worker")

#: How often the watching thread polls Redis (a request's abort is seen this
#: long after at most; a claim asks less often, ``Watched.ask``).
POLL_S = 0.5


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


class Watched(Protocol):
    """Something a running visit watches in Redis, polled by ``WATCHER``."""

    @property
    def client(self) -> Redis:
        """The Redis it is read from."""

    def ask(self, pipe: Pipeline) -> int:
        """Queue on ``pipe`` what this poll reads of it (nothing when it is not
        due): how many commands."""

    def hear(self, replies: list[Any], sent: float) -> bool:
        """Take the replies to those commands, sent at ``sent`` (monotonic
        clock): whether to go on watching it."""


class Watcher:
    """What the running visits of a worker process watch, polled every POLL_S
    by one daemon thread (started with the first), in one round trip per Redis
    client. One that cannot be read (Redis away) is asked again next time."""

    def __init__(self) -> None:
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """Watch nothing: a forked child (a loader's) runs none of its parent's visits."""
        self._lock = threading.Lock()
        #: Held while a poll is under way: what leaves, leaves after it.
        self._polling = threading.Lock()
        self._watched: set[Watched] = set()
        self._thread: threading.Thread | None = None

    def add(self, watched: Watched) -> None:
        """Poll ``watched`` from now on."""
        with self._lock:
            self._watched.add(watched)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
                self._thread.start()

    def remove(self, watched: Watched) -> None:
        """Poll ``watched`` no more, once the poll under way (which could renew a
        claim after its release, or take an abort it would not act on) has ended."""
        with self._lock:
            self._watched.discard(watched)
        with self._polling:
            pass

    def _run(self) -> None:
        while True:
            time.sleep(POLL_S)
            with self._polling:
                with self._lock:
                    watched = list(self._watched)
                by_client: dict[int, list[Watched]] = {}
                for one in watched:
                    by_client.setdefault(id(one.client), []).append(one)
                for group in by_client.values():
                    try:
                        self._poll(group)
                    except Exception:  # the thread watches every visit: it must not end
                        log.exception("could not watch %d running visits", len(group))

    def _poll(self, group: list[Watched]) -> None:
        pipe = group[0].client.pipeline(transaction=False)
        asked = [(one, one.ask(pipe)) for one in group]
        if not any(count for _, count in asked):
            return
        sent = time.monotonic()
        try:
            replies = pipe.execute()
        except RedisError:
            return  # Redis away: the next poll asks again
        start = 0
        for one, count in asked:
            if count and not one.hear(replies[start : start + count], sent):
                with self._lock:
                    self._watched.discard(one)
            start += count


#: What the running visits of this worker process watch.
WATCHER = Watcher()
