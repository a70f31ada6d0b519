"""Dramatiq middleware: dead-letter the messages Dramatiq's consumer cannot run.

A value pushed into a queue by hand, or by a client of another version, is
not a Dramatiq message: the consumer logs a decoding error and leaves it in
its acknowledgement set, where no one sees it. Each worker process sweeps
the queues it consumes at boot and every ``SWEEP_INTERVAL_S``, and moves such
messages to the queue's dead letters with their reason.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from dramatiq import Middleware

from actors.loop import run_every
from queues.dramatiq_broker import served_queues
from queues.dramatiq_queues import dead_letter_undecodable, record_reason
from queues.errors import Redis

#: How often each worker process dead-letters the messages of its queues that
#: Dramatiq cannot decode.
SWEEP_INTERVAL_S = 30.0

log = logging.getLogger("revisit.undecodable")
REASON = "not a Dramatiq message: Dramatiq cannot decode it"


class SweepUndecodable(Middleware):
    """Moves undecodable messages of this worker's queues to their dead letters."""

    def __init__(self, client: Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._stop = threading.Event()

    def sweep(self, queues: list[str]) -> int:
        """One pass over ``queues``; returns how many messages were dead-lettered."""
        moved = 0
        for queue in queues:
            now_ms = int(time.time() * 1000)
            for message_id in dead_letter_undecodable(self.client, queue, now_ms):
                record_reason(self.client, self.namespace, message_id, REASON)
                log.warning("dead-lettered undecodable message %s of %s", message_id, queue)
                moved += 1
        return moved

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        """Start sweeping the queues this worker consumes."""
        queues = served_queues(broker, worker)
        sweep = functools.partial(
            run_every, lambda now: self.sweep(queues), SWEEP_INTERVAL_S, self._stop, log, "sweeping"
        )
        threading.Thread(target=sweep, daemon=True, name="revisit-undecodable").start()

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        """Stop sweeping."""
        self._stop.set()
