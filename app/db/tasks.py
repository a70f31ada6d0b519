"""Tasks of the reference's task API, and the runner's writes, in PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from app.db.connection import DictConnection
from app.db.queries import query


def insert_task(conn: DictConnection, task: dict[str, Any], request_id: int) -> int:
    """Record a one-shot task that became request ``request_id``; its id."""
    params = {**task, "arguments": json.dumps(task["arguments"]), "request_id": request_id}
    row = conn.execute(query("insert_task"), params).fetchone()
    assert row is not None
    return int(row["id"])


def task_rows(
    conn: DictConnection,
    ids: list[int] | None = None,
    types: list[str] | None = None,
    statuses: list[str] | None = None,
    priorities: list[str] | None = None,
    before: datetime | None = None,
    after: datetime | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Tasks matching every filter given (None: any), in id order, with their
    request's progress and the reference's statuses of the task and its run."""
    params = {
        "ids": ids,
        "types": types,
        "statuses": statuses,
        "priorities": priorities,
        "before": before,
        "after": after,
        "limit": limit,
    }
    return conn.execute(query("task_rows"), params).fetchall()


def listed_origins_of(conn: DictConnection, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The most recently seen listing of each (url, visit_type) that has one."""
    params = {"urls": [u for u, _ in pairs], "visit_types": [v for _, v in pairs]}
    return conn.execute(query("listed_origins_of"), params).fetchall()


def set_queue_position(conn: DictConnection, visit_type: str, position_s: int) -> None:
    """Set the recurrent scheduler's queue position of ``visit_type`` (Unix seconds)."""
    conn.execute(query("set_queue_position"), {"visit_type": visit_type, "position": position_s})
