"""Per-hoster limits on concurrent visits, as a Dramatiq middleware.

A visit holds one of its hoster's slots (``REVISIT_HOSTER_LIMITS``, its ``"*"`` key
for any other hoster; none: unlimited) from before its actor runs
until after it ends, across every worker process (a Redis-backed concurrent
rate limiter). A visit whose hoster is full is not run: it raises
``HosterBusy``, which the ``visit`` actor retries with backoff, a wait
not counted among its transient failures' retries (DESIGN invariant 6).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from functools import cache
from typing import Any

import dramatiq
from dramatiq import Middleware
from dramatiq.middleware import MiddlewareError
from dramatiq.rate_limits import ConcurrentRateLimiter

from actors.visiting import count_wait
from app.domain.hosts import hoster_limit, hoster_of
from app.domain.lanes import MAX_TIME_LIMIT_S
from monitoring.metrics import HOSTER_BUSY
from queues.errors import Redis
from queues.workers import hoster_limiter

log = logging.getLogger("revisit.worker")
#: A slot outlives its visit's time limit by this (ms), so that a crashed
#: worker's slot is freed in the end.
SLOT_MARGIN_MS = 60_000


class HosterBusy(dramatiq.Retry, MiddlewareError):
    """The hoster has as many visits running as it may; retried later, uncounted.

    A MiddlewareError, so that Dramatiq lets it stop the message (it logs and
    ignores any other exception of a ``before_`` hook); a Retry, so that
    Retries backs off and tries it again."""


class HosterLimits(Middleware):
    """Holds a hoster slot for each ``visit`` message while it is processed."""

    def __init__(self, client: Redis, namespace: str, limits: dict[str, int]) -> None:
        self.client = client
        self.namespace = namespace
        self.limits = limits
        self._held: dict[str, contextlib.ExitStack] = {}
        self._lock = threading.Lock()

    @cache  # noqa: B019 - one limiter per hoster and TTL for the worker process's life
    def _limiter(self, host: str, limit: int, ttl_ms: int) -> ConcurrentRateLimiter:
        return hoster_limiter(self.client, self.namespace, host, limit, ttl_ms)

    def before_process_message(self, broker: Any, message: Any) -> None:
        """Take a slot of the visit's hoster, or raise HosterBusy."""
        if message.actor_name != "visit":
            return
        url = str(message.kwargs["url"])
        host = hoster_of(url)
        limit = hoster_limit(host, self.limits)
        if limit is None:
            return
        # Its visit's own limit is its visit type's, when it has one.
        limit_ms = message.options.get("visit_time_limit", MAX_TIME_LIMIT_S * 1000)
        ttl_ms = int(max(limit_ms, MAX_TIME_LIMIT_S * 1000)) + SLOT_MARGIN_MS
        held = contextlib.ExitStack()
        limiter = self._limiter(host, limit, ttl_ms)
        if not held.enter_context(limiter.acquire(raise_on_failure=False)):
            held.close()
            count_wait(message)
            HOSTER_BUSY.labels(str(message.kwargs["visit_type"])).inc()
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
