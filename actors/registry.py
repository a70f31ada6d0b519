"""Which workers serve which queue: the worker side of ``queues.workers``.

Each worker process registers its thread count for the queues it consumes
and refreshes it every few seconds; the scheduler reads it to estimate each
queue's wait.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from datetime import datetime
from typing import Any

from dramatiq import Middleware

from actors.loop import run_every
from queues.dramatiq_broker import served_queues, worker_threads
from queues.errors import Redis
from queues.keys import queue_workers
from queues.workers import REFRESH_S

log = logging.getLogger("revisit.workers")


class WorkerRegistry(Middleware):
    """Dramatiq middleware: registers this worker process's threads per queue."""

    def __init__(self, client: Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._stop = threading.Event()

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        """Register now and every ``REFRESH_S`` until shutdown (through Redis outages)."""
        queues, threads = served_queues(broker, worker), worker_threads(worker)

        def register(now: datetime) -> None:
            pipe = self.client.pipeline(transaction=False)
            for queue in queues:
                key = queue_workers(self.namespace, queue)
                pipe.hset(key, str(os.getpid()), f"{threads}|{now.timestamp():.0f}")
            pipe.execute()

        refresh = functools.partial(run_every, register, REFRESH_S, self._stop, log, "registering")
        threading.Thread(target=refresh, daemon=True, name="revisit-registry").start()

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        self._stop.set()
        pipe = self.client.pipeline(transaction=False)
        for queue in broker.get_declared_queues():
            pipe.hdel(queue_workers(self.namespace, queue), str(os.getpid()))
        pipe.execute()
