"""Tasks of the reference's task API, and the runner's writes, in PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from app.db.connection import DictConnection
from app.db.listings import mirror_row
from app.db.queries import query
from app.domain.placement import MirrorRow


def insert_task(
    conn: DictConnection,
    task: dict[str, Any],
    request_id: int | None = None,
    lister_id: UUID | None = None,
) -> int:
    """Record a one-shot task that became request ``request_id``, or a recurring
    one that scheduled lister ``lister_id``; its id."""
    params = {
        "policy": "oneshot",
        **task,
        "arguments": json.dumps(task["arguments"]),
        "request_id": request_id,
        "lister_id": lister_id,
    }
    row = conn.execute(query("insert_task"), params).fetchone()
    assert row is not None
    return int(row["id"])


def task_rows(
    conn: DictConnection,
    ids: list[int] | None = None,
    types: list[str] | None = None,
    statuses: list[str] | None = None,
    priorities: list[str] | None = None,
    policy: str | None = None,
    before: datetime | None = None,
    after: datetime | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Tasks matching every filter given (None: any), in id order, with their
    request's progress (the latest retry's) or their lister's schedule, and the
    reference's statuses of the task and its run."""
    params = {
        "ids": ids,
        "types": types,
        "statuses": statuses,
        "priorities": priorities,
        "policy": policy,
        "before": before,
        "after": after,
        "limit": limit,
    }
    return conn.execute(query("task_rows"), params).fetchall()


def listed_origins_of(
    conn: DictConnection, pairs: list[tuple[str, str]], lister_id: UUID | None = None
) -> list[dict[str, Any]]:
    """The most recently seen listing of each (url, visit_type) that has one (by
    lister ``lister_id`` if given)."""
    params = {
        "urls": [u for u, _ in pairs],
        "visit_types": [v for _, v in pairs],
        "lister_id": lister_id,
    }
    return conn.execute(query("listed_origins_of"), params).fetchall()


def set_queue_position(conn: DictConnection, visit_type: str, position_s: int) -> None:
    """Set the recurrent scheduler's queue position of ``visit_type`` (Unix seconds)."""
    conn.execute(query("set_queue_position"), {"visit_type": visit_type, "position": position_s})


def upsert_visit_stats(conn: DictConnection, stats: list[dict[str, Any]]) -> list[MirrorRow]:
    """Upsert each origin's given stats in turn (a later one of the same origin
    overwrites); the mirror rows of the written origins."""
    return [mirror_row(row) for s in stats for row in conn.execute(query("upsert_visit_stats"), s)]


def scheduler_metrics(
    conn: DictConnection, lister_id: UUID | None, visit_type: str | None
) -> list[dict[str, Any]]:
    """Rows of ``scheduler_metrics`` (of one lister, of one visit type: None, any)."""
    params = {"lister_id": lister_id, "visit_type": visit_type}
    return conn.execute(query("get_scheduler_metrics"), params).fetchall()


def declare_task_type(conn: DictConnection, visit_type: str, task_type: dict[str, Any]) -> None:
    """Keep the task type a client declared for ``visit_type`` (JSON-ready values)."""
    conn.execute(
        query("declare_task_type"), {"name": visit_type, "task_type": json.dumps(task_type)}
    )


def declared_task_types(conn: DictConnection) -> dict[str, dict[str, Any]]:
    """Visit type -> the task type a client declared for it (those with one)."""
    return {r["name"]: r["task_type"] for r in conn.execute(query("declared_task_types"))}
