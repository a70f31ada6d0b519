"""Which workers serve which queue, and how long their recent visits took, in Redis.

Each worker process registers its thread count for the queues it consumes
(``actors.registry.WorkerRegistry``) and the visit actor records each visit's
duration; the scheduler and ``revisit status`` read both.
"""

from __future__ import annotations

import time

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


def queue_capacity(client: redis.Redis, namespace: str, queue: str) -> tuple[int, list[float]]:
    """Worker threads serving ``queue`` now, and its recent visit durations."""
    now = time.time()
    threads = 0
    registered: dict[bytes, bytes] = client.hgetall(queue_workers(namespace, queue))  # type: ignore[assignment]
    for value in registered.values():
        count, _, seen = value.decode().partition("|")
        if now - float(seen) < STALE_S:
            threads += int(count)
    raw: list[bytes] = client.lrange(queue_durations(namespace, queue), 0, -1)  # type: ignore[assignment]
    return threads, [float(v) for v in raw]
