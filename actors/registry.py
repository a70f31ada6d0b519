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
from queues.workers import REFRESH_S, register, unregister

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

        def refresh(now: datetime) -> None:
            register(self.client, self.namespace, queues, os.getpid(), threads, now.timestamp())

        run = functools.partial(run_every, refresh, REFRESH_S, self._stop, log, "registering")
        threading.Thread(target=run, daemon=True, name="revisit-registry").start()

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        self._stop.set()
        unregister(self.client, self.namespace, broker.get_declared_queues(), os.getpid())
