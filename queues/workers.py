"""What the worker processes share in Redis beside Dramatiq's queues: who serves
each queue, how long its visits took and how they ended, which requests were
aborted, each hoster's concurrent-visit slots.

Each worker process registers its thread count for the queues it consumes
(``actors.registry.WorkerRegistry``) and the visit actor records each visit's
duration and outcome; the scheduler and ``revisit status`` read them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

import redis
from dramatiq.rate_limits import ConcurrentRateLimiter
from dramatiq.rate_limits.backends import RedisBackend
from redis.client import Pipeline

from queues.keys import (
    aborted_requests,
    hoster_slots,
    queue_durations,
    queue_workers,
    visit_outcomes,
)

#: How often a worker process renews its registration.
REFRESH_S = 10.0
#: A registration older than this belongs to a worker that is gone.
STALE_S = 3 * REFRESH_S
KEPT_DURATIONS = 200


def register(
    client: redis.Redis, namespace: str, queues: Iterable[str], pid: int, threads: int, at: float
) -> None:
    """Record that process ``pid`` serves each of ``queues`` with ``threads``
    threads, seen at ``at`` (unix s)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.hset(queue_workers(namespace, queue), str(pid), f"{threads}|{at:.0f}")
    pipe.execute()


def unregister(client: redis.Redis, namespace: str, queues: Iterable[str], pid: int) -> None:
    """Forget that process ``pid`` serves ``queues`` (it stops)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.hdel(queue_workers(namespace, queue), str(pid))
    pipe.execute()


def record_visit(
    pipe: Pipeline, namespace: str, queue: str, visit_type: str, status: str, duration_s: float
) -> None:
    """Record one finished visit on ``pipe``, which the caller executes (with
    what else it sends at the visit's end): its duration for its queue (the
    latest KEPT_DURATIONS), and one more visit of ``visit_type`` ended in ``status``."""
    key = queue_durations(namespace, queue)
    pipe.lpush(key, f"{duration_s:.3f}")
    pipe.ltrim(key, 0, KEPT_DURATIONS - 1)
    pipe.hincrby(visit_outcomes(namespace, visit_type), status, 1)


class Capacity(NamedTuple):
    """Who serves a Dramatiq queue now, and how long its recent visits took."""

    threads: int
    """Worker threads of the live registrations."""
    durations_s: list[float]
    """Its latest visit durations, newest first."""


def capacities(client: redis.Redis, namespace: str, queues: Iterable[str]) -> dict[str, Capacity]:
    """The capacity of each of ``queues``, read in one round trip."""
    queues = list(queues)
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.hgetall(queue_workers(namespace, queue))
        pipe.lrange(queue_durations(namespace, queue), 0, -1)
    replies = pipe.execute()
    now = time.time()
    found = {}
    for queue, registered, durations in zip(queues, replies[::2], replies[1::2], strict=True):
        threads = 0
        for value in registered.values():
            count, _, seen = value.decode().partition("|")
            if now - float(seen) < STALE_S:
                threads += int(count)
        found[queue] = Capacity(threads, [float(v) for v in durations])
    return found


def outcomes(client: redis.Redis, namespace: str, visit_type: str) -> dict[str, int]:
    """How many visits of ``visit_type`` ended in each status since the count began."""
    raw: dict[bytes, bytes] = client.hgetall(visit_outcomes(namespace, visit_type))  # type: ignore[assignment]
    return {k.decode(): int(v) for k, v in raw.items()}


def abort(client: redis.Redis, namespace: str, request_ids: list[int]) -> None:
    """Tell the workers that ``request_ids`` were aborted: one holding a visit
    of one of them skips or stops it (``take_abort``)."""
    client.sadd(aborted_requests(namespace), *request_ids)


def take_abort(client: redis.Redis, namespace: str, request_id: int) -> bool:
    """True if ``request_id`` was aborted, once: its abort is taken."""
    return bool(client.srem(aborted_requests(namespace), request_id))


def take_abort_on(pipe: Pipeline, namespace: str, request_id: int) -> None:
    """Queue ``take_abort`` on ``pipe`` (the caller executes it): its reply is
    1 if ``request_id`` was aborted (the abort taken), else 0."""
    pipe.srem(aborted_requests(namespace), request_id)


def hoster_limiter(
    client: redis.Redis, namespace: str, host: str, limit: int, ttl_ms: int
) -> ConcurrentRateLimiter:
    """Dramatiq's limiter of ``host`` to ``limit`` concurrent visits, each slot
    held at most ``ttl_ms`` (a crashed worker's slot is freed in the end)."""
    backend = RedisBackend(client=client)
    key = hoster_slots(namespace, host)
    return ConcurrentRateLimiter(backend, key, limit=limit, ttl=ttl_ms)  # type: ignore[no-untyped-call]
