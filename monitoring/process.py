"""What each revisit process starts to be observable."""

from __future__ import annotations

import threading

from app.settings import Settings
from monitoring.coverage import CoverageRefresher
from monitoring.metrics import serve


def serve_scheduler(settings: Settings) -> threading.Event | None:
    """Serve the scheduler's /metrics and start the periodic figures (coverage
    into scheduler_metrics, drift, time to first visit) unless their interval
    is 0; returns the event that stops them."""
    serve(settings.scheduler_metrics_port, settings.metrics_address)
    if not settings.metrics_refresh_interval_s:
        return None
    return CoverageRefresher(settings).start()
