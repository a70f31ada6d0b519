"""Figures read from PostgreSQL for the live view and the metrics."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from app.db.connection import DictConnection
from app.db.queries import query


def open_requests(conn: DictConnection) -> dict[str, dict[str, int]]:
    """Requests not yet done: their count per visit type and status."""
    found: dict[str, dict[str, int]] = defaultdict(dict)
    for r in conn.execute(query("open_requests_by_visit_type")):
        found[str(r["visit_type"])][str(r["status"])] = int(r["n"])
    return found


def schedule_drift(conn: DictConnection, now: datetime) -> dict[str, float]:
    """Per visit type, how far real time is ahead of the scheduler's queue position."""
    rows = conn.execute(query("schedule_drift"), {"now": now})
    return {str(r["visit_type"]): float(r["drift_s"]) for r in rows}
