"""Lister schedules and runs in PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.lister_schedule import ListerSchedule


def get_schedule(
    conn: DictConnection, lister_id: UUID
) -> tuple[ListerSchedule, dict[str, Any]] | None:
    """A lister instance's schedule and arguments, locked until the transaction
    ends; None if it has no schedule."""
    row = conn.execute(query("lister_schedule_get"), {"lister_id": lister_id}).fetchone()
    if row is None:
        return None
    arguments = row.pop("arguments")
    return ListerSchedule(**row), arguments


def upsert_schedule(
    conn: DictConnection, lister_id: UUID, arguments: dict[str, Any], schedule: ListerSchedule
) -> bool:
    """Set a lister instance's schedule (a paused one stays paused); whether it is enabled."""
    row = conn.execute(
        query("lister_schedule_upsert"),
        {
            "lister_id": lister_id,
            "arguments": Jsonb(arguments),
            "full_interval": schedule.full_interval,
            "incremental_interval": schedule.incremental_interval,
            "next_full_run": schedule.next_full_run,
            "next_incremental_run": schedule.next_incremental_run,
        },
    ).fetchone()
    return bool(row and row["enabled"])


def enable_schedule(conn: DictConnection, lister_id: UUID, enabled: bool) -> bool:
    """Resume (``enabled``) or pause a schedule; False if the lister has none."""
    params = {"lister_id": lister_id, "enabled": enabled}
    return conn.execute(query("lister_schedule_enable"), params).fetchone() is not None


def delete_schedule(conn: DictConnection, lister_id: UUID, now: datetime) -> bool:
    """Remove a schedule, keeping its runs (one still out is marked lost); False if none."""
    params = {"lister_id": lister_id, "now": now}
    return conn.execute(query("lister_schedule_delete"), params).fetchone() is not None


def all_schedules(conn: DictConnection) -> list[dict[str, Any]]:
    """Every schedule with its lister's name and instance (``revisit lister schedules``)."""
    return conn.execute(query("lister_schedules_all")).fetchall()


def recent_runs(
    conn: DictConnection, name: str | None, instance_name: str | None, per_lister: int
) -> list[dict[str, Any]]:
    """The latest ``per_lister`` runs of each lister instance matching (None: any), newest first."""
    params = {"name": name, "instance_name": instance_name, "per_lister": per_lister}
    return conn.execute(query("lister_runs_recent"), params).fetchall()


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
