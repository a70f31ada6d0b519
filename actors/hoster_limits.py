"""Per-hoster limits on concurrent visits, as a Dramatiq middleware.

A visit holds one of its hoster's slots (``REVISIT_HOSTER_LIMITS``, its ``"*"`` key
for any other hoster; none: unlimited) from before its actor runs
until after it ends, across every worker process (a Redis-backed concurrent
rate limiter). A visit whose hoster is full is not run: it raises
``HosterBusy``, which the ``visit`` actor retries with backoff, uncounted
among its transient failures (DESIGN invariant 6).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

import dramatiq
from dramatiq import Middleware
from dramatiq.middleware import MiddlewareError
from dramatiq.rate_limits import ConcurrentRateLimiter
from dramatiq.rate_limits.backends import RedisBackend

from app.domain.hosts import hoster_limit, hoster_of
from queues.errors import Redis
from queues.keys import hoster_slots

log = logging.getLogger("revisit.worker")


class HosterBusy(dramatiq.Retry, MiddlewareError):
    """The hoster has as many visits running as it may; retried later, uncounted.

    A MiddlewareError, so that Dramatiq lets it stop the message (it logs and
    ignores any other exception of a ``before_`` hook); a Retry, so that
    Retries backs off and tries it again."""


class HosterLimits(Middleware):
    """Holds a hoster slot for each ``visit`` message while it is processed."""

    def __init__(
        self,
        client: Redis,
        namespace: str,
        limits: dict[str, int],
        slot_ttl_ms: int,
        on_busy: Callable[[str], None] = lambda visit_type: None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.limits = limits
        self.slot_ttl_ms = slot_ttl_ms
        self.on_busy = on_busy
        self._held: dict[str, contextlib.ExitStack] = {}
        self._lock = threading.Lock()

    @cache  # noqa: B019 - one limiter per hoster and TTL for the worker process's life
    def _limiter(self, host: str, limit: int, ttl_ms: int) -> ConcurrentRateLimiter:
        backend = RedisBackend(client=self.client)
        key = hoster_slots(self.namespace, host)
        return ConcurrentRateLimiter(backend, key, limit=limit, ttl=ttl_ms)  # type: ignore[no-untyped-call]

    def before_process_message(self, broker: Any, message: Any) -> None:
        """Take a slot of the visit's hoster, or raise HosterBusy."""
        if message.actor_name != "visit":
            return
        url = str(message.kwargs["url"])
        host = hoster_of(url)
        limit = hoster_limit(host, self.limits)
        if limit is None:
            return
        # A slot outlives its visit's own limit (its visit type's, when it has one)
        # by a margin, so that a crashed worker's slot is freed in the end.
        ttl_ms = max(self.slot_ttl_ms, int(message.options.get("visit_time_limit", 0)) + 60_000)
        held = contextlib.ExitStack()
        limiter = self._limiter(host, limit, ttl_ms)
        if not held.enter_context(limiter.acquire(raise_on_failure=False)):
            held.close()
            self.on_busy(str(message.kwargs["visit_type"]))
            log.info("%s: %s has %d visits running, retrying later", url, host, limit)
            raise HosterBusy(f"{host} has {limit} visits running")
        with self._lock:
            self._held[message.message_id] = held

    def after_process_message(self, broker: Any, message: Any, **outcome: Any) -> None:
        """Give the slot back."""
        with self._lock:
            held = self._held.pop(message.message_id, None)
        if held is not None:
            held.close()

    def after_skip_message(self, broker: Any, message: Any) -> None:
        """Give the slot back (a skipped message was not processed)."""
        self.after_process_message(broker, message)
