"""What each revisit process starts to be observable."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

from app.settings import Settings
from monitoring.coverage import CoverageRefresher
from monitoring.metrics import (
    JOURNAL_DEAD_LETTERS,
    JOURNAL_OUTCOMES,
    JOURNAL_OWNED,
    REQUEST_LATENCY,
    SCHEDULER_OWNED,
    serve,
    serve_registry,
)
from monitoring.multiprocess import OwnedFiles, fresh_directory

#: Request kinds whose latency series exist from the start (others appear when seen).
REQUEST_KINDS = ("save_code_now",)
OUTCOMES = ("eventful", "uneventful", "failed")
#: The fields a dead letter's reason names (app/kafka/codec.py), and
#: "database" for a value PostgreSQL refused.
DEAD_LETTER_REASONS = (
    *("value", "origin", "visit", "date", "status", "snapshot", "type", "metadata"),
    "database",
)


def serve_scheduler(settings: Settings, now: datetime) -> CoverageRefresher:
    """Serve the scheduler's /metrics; returns what refreshes the periodic figures
    (coverage into scheduler_metrics, drift, time to first visit). The scheduler
    creates the time-to-first-visit series of each visit type when it reads the
    table, so a rate sees the first visits (see serve_journal)."""
    serve(settings.metrics_port, settings.metrics_address, SCHEDULER_OWNED)
    return CoverageRefresher(settings, now)


def serve_journal(settings: Settings, visit_types: Iterable[str]) -> None:
    """Serve the journal client's /metrics, its known series present from the start."""
    serve(settings.metrics_port, settings.metrics_address, JOURNAL_OWNED)
    start_journal_series(visit_types)


def journal_group_dir(settings: Settings) -> Path:
    """The multiprocess directory of the journal's client processes, named after
    the port (one group serves a port), emptied of a previous run's files."""
    name = f"revisit-journal-metrics-{settings.metrics_port}"
    return fresh_directory(Path(tempfile.gettempdir()) / name)


def serve_journal_group(settings: Settings, directory: Path) -> None:
    """Serve on the journal's port, for the supervisor of ``revisit journal
    --processes N``, what its client processes write into ``directory``
    (``monitoring.multiprocess``; no process_* or GC figures: the mode has none)."""
    registry = CollectorRegistry()
    registry.register(OwnedFiles(directory, JOURNAL_OWNED))
    serve_registry(settings.metrics_port, settings.metrics_address, registry)


def start_journal_series(visit_types: Iterable[str]) -> None:
    """Create the journal's known series (of the table's ``visit_types``) at zero:
    a rate cannot see a series' jump from nothing to its first value."""
    for reason in DEAD_LETTER_REASONS:
        JOURNAL_DEAD_LETTERS.labels(reason)
    for visit_type in visit_types:
        for kind in REQUEST_KINDS:
            REQUEST_LATENCY.labels(kind, visit_type)
        for outcome in OUTCOMES:
            JOURNAL_OUTCOMES.labels(outcome, visit_type)
