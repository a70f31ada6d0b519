"""Which workers serve which queue, and how long their recent visits took, in Redis.

Each worker process registers its thread count for the queues it consumes
(``actors.registry.WorkerRegistry``) and the visit actor records each visit's
duration; the scheduler and ``revisit status`` read both.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

import redis

from queues.keys import queue_durations, queue_workers

#: How often a worker process renews its registration.
REFRESH_S = 10.0
#: A registration older than this belongs to a worker that is gone.
STALE_S = 3 * REFRESH_S
KEPT_DURATIONS = 200


def record_duration(client: redis.Redis, namespace: str, queue: str, duration_s: float) -> None:
    """Remember one visit's duration for its queue (the latest KEPT_DURATIONS)."""
    key = queue_durations(namespace, queue)
    pipe = client.pipeline(transaction=False)
    pipe.lpush(key, f"{duration_s:.3f}")
    pipe.ltrim(key, 0, KEPT_DURATIONS - 1)
    pipe.execute()


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
