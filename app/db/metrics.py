"""Figures read from PostgreSQL for the live view and the metrics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.placement import MirrorRow


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


def refresh_scheduler_metrics(
    conn: DictConnection, now: datetime, active_since: datetime, overdue_before: datetime
) -> list[dict[str, Any]]:
    """Recompute ``scheduler_metrics`` at ``now``; its rows, with a ``lister`` name."""
    params = {"now": now, "active_since": active_since, "overdue_before": overdue_before}
    with conn.transaction():
        return conn.execute(query("refresh_scheduler_metrics"), params).fetchall()


def first_visits_since(conn: DictConnection, since: datetime) -> list[dict[str, Any]]:
    """The origins whose first visit ended since ``since``, with how long they waited for it."""
    return conn.execute(query("first_visits_since"), {"since": since}).fetchall()


def pool_rows_by_lister(conn: DictConnection) -> Iterator[tuple[str, MirrorRow]]:
    """Every listed origin's lister name and mirror row, read in one transaction."""
    with conn.transaction(), conn.cursor(name="pools_by_lister", row_factory=tuple_row) as cur:
        cur.itersize = 20000
        cur.execute(query("pool_rows_by_lister"))
        for lister, *columns in cur:
            yield lister, MirrorRow(*columns)
