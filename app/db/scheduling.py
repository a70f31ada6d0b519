"""Scheduler bookkeeping in PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.db.connection import DictConnection
from app.db.queries import query


@dataclass(frozen=True, slots=True)
class VisitTypeConfig:
    """A row of visit_types."""

    name: str
    max_queue_length: int
    num_retries: int
    retry_delay_s: float
    time_limit_s: float
    min_interval_s: float
    max_interval_s: float
    default_interval_s: float


def visit_type_configs(conn: DictConnection) -> dict[str, VisitTypeConfig]:
    """Configuration of every visit type, by name."""
    return {
        str(r["name"]): VisitTypeConfig(
            name=str(r["name"]),
            max_queue_length=int(r["max_queue_length"]),
            num_retries=int(r["num_retries"]),
            retry_delay_s=float(r["retry_delay_s"]),
            time_limit_s=float(r["time_limit_s"]),
            min_interval_s=float(r["min_interval_s"]),
            max_interval_s=float(r["max_interval_s"]),
            default_interval_s=float(r["default_interval_s"]),
        )
        for r in conn.execute(query("visit_type_config"))
    }


def mark_scheduled(conn: DictConnection, ids: list[int], now: datetime) -> list[dict[str, Any]]:
    """Stamp ``last_scheduled`` on a batch; return url, visit type and loader arguments
    (None for an origin none of whose listings has any).

    Rows come back in id order (ids are sent sorted too, so the index is read
    in order), whatever the order of ``ids``: the caller's orders, and a test's
    expectations, do not depend on how PostgreSQL ran the update.
    """
    return list(conn.execute(query("mark_scheduled"), {"ids": sorted(ids), "now": now}))


def advance_queue_position(conn: DictConnection, visit_type: str, target_s: float) -> None:
    """Move the queue position forward to ``target_s`` (never backward)."""
    position = datetime.fromtimestamp(target_s, tz=UTC)
    conn.execute(query("advance_queue_position"), {"visit_type": visit_type, "position": position})


def origins_by_id(conn: DictConnection, ids: list[int]) -> dict[int, dict[str, Any]]:
    """url and visit type of each stats id."""
    return {int(r["id"]): r for r in conn.execute(query("origins_by_id"), {"ids": ids})}
