"""Running a long-lived process's step at a fixed pace until told to stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime


def run_every(
    step: Callable[[datetime], object],
    interval_s: float,
    stop: threading.Event,
    log: logging.Logger,
) -> None:
    """Call ``step(now)`` every ``interval_s`` until ``stop`` is set; a failed step
    (a service away) is logged and retried at the next beat, never fatal."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            step(datetime.now(tz=UTC))
        except Exception:
            log.exception("step failed; retrying")
        stop.wait(max(0.0, interval_s - (time.monotonic() - started)))
