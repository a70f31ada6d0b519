"""Which workers serve which queue, and how long their recent visits took.

Each worker process registers its thread count for the queues it consumes
and refreshes it every few seconds; the visit actor records each visit's
duration. The scheduler reads both to estimate each queue's wait.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis
from dramatiq import Middleware

from queues.keys import queue_durations, queue_workers

REFRESH_S = 10.0
#: A registration older than this belongs to a worker that is gone.
STALE_S = 3 * REFRESH_S
KEPT_DURATIONS = 200


class WorkerRegistry(Middleware):
    """Dramatiq middleware: registers this worker process's threads per queue."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._stop = threading.Event()

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        queues = sorted(worker.consumer_whitelist or broker.get_declared_queues())
        threads = int(worker.worker_threads)

        def refresh() -> None:
            while True:
                pipe = self.client.pipeline(transaction=False)
                for queue in queues:
                    key = queue_workers(self.namespace, queue)
                    pipe.hset(key, str(os.getpid()), f"{threads}|{time.time():.0f}")
                pipe.execute()
                if self._stop.wait(REFRESH_S):
                    return

        threading.Thread(target=refresh, daemon=True, name="revisit-registry").start()

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        self._stop.set()
        pipe = self.client.pipeline(transaction=False)
        for queue in broker.get_declared_queues():
            pipe.hdel(queue_workers(self.namespace, queue), str(os.getpid()))
        pipe.execute()


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
