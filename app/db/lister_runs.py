"""Lister schedules and runs in PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.lister_schedule import ListerSchedule


def upsert_schedule(
    conn: DictConnection,
    lister_id: UUID,
    arguments: dict[str, Any],
    full_interval: timedelta,
    incremental_interval: timedelta | None,
    first_run: datetime,
) -> None:
    """Set a lister instance's schedule; its first full run is due at ``first_run``."""
    conn.execute(
        query("lister_schedule_upsert"),
        {
            "lister_id": lister_id,
            "arguments": Jsonb(arguments),
            "full_interval": full_interval,
            "incremental_interval": incremental_interval,
            "first_run": first_run,
        },
    )


def claim_due_runs(
    conn: DictConnection, now: datetime, lost_before: datetime, limit: int
) -> list[dict[str, Any]]:
    """Create a run for each due schedule with none out (one out since before
    ``lost_before`` is marked lost); the runs created."""
    params = {"now": now, "lost_before": lost_before, "limit": limit}
    return conn.execute(query("lister_runs_claim_due"), params).fetchall()


def release_run(conn: DictConnection, run_id: int, now: datetime, error: str) -> None:
    """Give back a claimed run that could not be sent."""
    conn.execute(query("lister_run_release"), {"run_id": run_id, "now": now, "error": error})


def start_run(conn: DictConnection, run_id: int, now: datetime) -> dict[str, Any] | None:
    """Mark a run started; it with its lister and schedule, None if it is not startable."""
    return conn.execute(query("lister_run_start"), {"run_id": run_id, "now": now}).fetchone()


def run_progress(conn: DictConnection, run_id: int, count: int, state: dict[str, Any]) -> None:
    """Count a page of ``count`` origins to a run and save the lister's state after it."""
    params = {"run_id": run_id, "count": count, "state": Jsonb(state)}
    conn.execute(query("lister_run_progress"), params)


def lock_schedule(conn: DictConnection, lister_id: UUID, run_id: int) -> ListerSchedule | None:
    """The schedule of a lister, locked, if ``run_id`` is still its run out."""
    params = {"lister_id": lister_id, "run_id": run_id}
    row = conn.execute(query("lister_schedule_lock"), params).fetchone()
    return None if row is None else ListerSchedule(**row)


def finish_run(
    conn: DictConnection, run_id: int, error: str | None, now: datetime, schedule: ListerSchedule
) -> None:
    """Record a run's outcome (failed if ``error``) and its lister's next schedule."""
    conn.execute(
        query("lister_run_finish"),
        {
            "run_id": run_id,
            "status": "failed" if error else "succeeded",
            "now": now,
            "error": error,
            "next_full_run": schedule.next_full_run,
            "next_incremental_run": schedule.next_incremental_run,
            "failures_in_a_row": schedule.failures_in_a_row,
        },
    )


def lister_overview(conn: DictConnection) -> list[dict[str, Any]]:
    """Every lister instance with its schedule and latest run (``revisit lister list``)."""
    return conn.execute(query("lister_overview")).fetchall()
