"""Scheduler bookkeeping in PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.policies import default_policies, spacing_of
from app.domain.visit_stats import Spacing

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class VisitTypeConfig:
    """A row of visit_types."""

    name: str
    max_queue_length: int
    num_retries: int
    """Retries after a transient failure."""
    retry_delay_s: float
    """First retry's delay, doubling at each retry."""
    time_limit_s: float
    """Longest a visit may run."""
    min_interval_s: float
    max_interval_s: float
    age_multiplier_s2: float | None = None
    measured_capacity_per_day: float | None = None
    spacing: Spacing = "ladder"
    visit_cost_reference_s: float | None = None
    """Typical worker time of a visit (s), which origins' visit costs are
    weighed against; None while unknown."""
    loader: str = ""
    """Entry point of the loader that visits its origins ("": named like it)."""
    enabled: bool = True
    """Whether the scheduler sends its visits (a visit type a listing created is
    paused until an operator enables it)."""


def visit_type_configs(conn: DictConnection) -> dict[str, VisitTypeConfig]:
    """Configuration of every visit type, by name, with the spacing its policies ask for."""
    configured: dict[str, dict[str, float]] = {}
    for r in conn.execute(query("all_policies")):
        configured.setdefault(str(r["visit_type"]), {})[str(r["policy"])] = float(r["weight"])
    return {
        str(r["name"]): VisitTypeConfig(
            name=str(r["name"]),
            max_queue_length=int(r["max_queue_length"]),
            num_retries=int(r["num_retries"]),
            retry_delay_s=float(r["retry_delay_s"]),
            time_limit_s=float(r["time_limit_s"]),
            min_interval_s=float(r["min_interval_s"]),
            max_interval_s=float(r["max_interval_s"]),
            age_multiplier_s2=r["age_multiplier_s2"],
            measured_capacity_per_day=r["measured_capacity_per_day"],
            visit_cost_reference_s=r["visit_cost_reference_s"],
            loader=str(r["loader"]),
            enabled=bool(r["enabled"]),
            spacing=spacing_of(configured.get(str(r["name"])) or default_policies(str(r["name"]))),
        )
        for r in conn.execute(query("visit_type_config"))
    }


def mark_scheduled(conn: DictConnection, ids: list[int], now: datetime) -> list[dict[str, Any]]:
    """Stamp ``last_scheduled`` on a batch; return url, visit type and loader arguments
    (None for an origin none of whose listings has any).

    The ids are sent sorted (the index is read in order), and the rows come
    back in the order of ``ids`` (the order the policies picked them):
    ``UPDATE ... RETURNING`` yields them in an order that no run reproduces.
    """
    rows = conn.execute(query("mark_scheduled"), {"ids": sorted(ids), "now": now})
    rank = {origin: k for k, origin in enumerate(ids)}
    return sorted(rows, key=lambda r: rank[int(r["id"])])


def advance_queue_position(conn: DictConnection, visit_type: str, target_s: float) -> None:
    """Move the queue position forward to ``target_s`` (never backward)."""
    position = datetime.fromtimestamp(target_s, tz=UTC)
    conn.execute(query("advance_queue_position"), {"visit_type": visit_type, "position": position})


def origins_by_id(conn: DictConnection, ids: list[int]) -> dict[int, dict[str, Any]]:
    """url and visit type of each stats id."""
    return {int(r["id"]): r for r in conn.execute(query("origins_by_id"), {"ids": ids})}


def change_rate_classes(
    conn: DictConnection, visit_type: str, prior_rate_per_day: float
) -> list[tuple[float, float]]:
    """(rate per day, origins) classes of the live origins planned by learned rate."""
    rows = conn.execute(
        query("change_rate_classes"),
        {"visit_type": visit_type, "prior_rate_per_day": prior_rate_per_day},
    )
    return [(float(r["rate_per_day"]), float(r["origins"])) for r in rows]


def floor_only_origins(conn: DictConnection, visit_type: str) -> int:
    """Live origins planned at the floor only (their forge reports last_update)."""
    row = conn.execute(query("floor_only_origins"), {"visit_type": visit_type}).fetchone()
    return int(row["origins"]) if row else 0


def set_age_multiplier(
    conn: DictConnection,
    visit_type: str,
    multiplier_s2: float,
    capacity_per_day: float,
    now: datetime,
    cost_reference_s: float | None = None,
) -> None:
    """Record the visit type's age-optimal multiplier, which the journal plans with,
    and the typical visit cost if none is recorded yet (a recorded one is kept)."""
    conn.execute(
        query("set_age_multiplier"),
        {
            "visit_type": visit_type,
            "multiplier": multiplier_s2,
            "capacity_per_day": capacity_per_day,
            "now": now,
            "cost_reference_s": cost_reference_s,
        },
    )


def set_max_queue_length(
    conn: DictConnection, visit_type: str, length: int, time_limit_s: float | None = None
) -> None:
    """Bound every queue of a visit type to ``length`` messages (queued or running),
    and its visits to ``time_limit_s`` if given."""
    params = {"visit_type": visit_type, "length": length, "time_limit_s": time_limit_s}
    conn.execute(query("set_max_queue_length"), params)
