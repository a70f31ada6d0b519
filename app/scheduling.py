"""One scheduling step for one visit type: pop, record, hand to the caller to enqueue."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.context import Context
from app.db.connection import DictConnection
from app.db.scheduling import advance_queue_position, mark_scheduled
from app.domain.placement import epoch_s
from app.mirror_sync import ensure_built

log = logging.getLogger(__name__)

#: Pools ordered by next visit target: only their picks advance the queue position.
TARGET_ORDERED_POOLS = frozenset({"no_last_update", "up_to_date"})


@dataclass(frozen=True)
class VisitOrder:
    """What a worker needs to visit one origin: the payload of a visit message."""

    origin_id: int
    url: str
    visit_type: str
    arguments: dict[str, Any]
    visit: int
    scheduled_at: float

    def as_kwargs(self) -> dict[str, Any]:
        """The visit actor's keyword arguments."""
        return {
            "origin_id": self.origin_id,
            "url": self.url,
            "visit_type": self.visit_type,
            "arguments": self.arguments,
            "visit": self.visit,
            "scheduled_at": self.scheduled_at,
        }


@dataclass
class StepResult:
    """What one scheduling step did."""

    visit_type: str
    free_slots: int
    orders: list[VisitOrder] = field(default_factory=list)
    cooled: int = 0
    lost: int = 0
    rebuilt: bool = False


def free_slots(max_queue_length: int, depth: int, min_free_fraction: float) -> int:
    """How many visits to send now: none until enough slots are free to be worth a batch."""
    free = max(0, max_queue_length - depth)
    if free == 0 or free < min_free_fraction * max_queue_length:
        return 0
    return free


def schedule_step(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    slots: int,
    now: datetime,
) -> StepResult:
    """Pop up to ``slots`` origins of ``visit_type`` and record them as scheduled.

    Redis moves them to in flight first; if this process dies before the
    Postgres update or the enqueue, they return to their pool after the
    scheduled cooldown, so no visit is lost.
    """
    result = StepResult(visit_type, slots)
    result.rebuilt = ensure_built(conn, ctx, visit_type, now)
    now_s = epoch_s(now)
    popped = ctx.mirror.pop(visit_type, slots, now_s, ctx.cooldowns.scheduled.total_seconds())
    result.cooled, result.lost = popped.cooled, popped.lost
    if not popped.popped:
        return result
    ids = [p.id for p in popped.popped]
    by_target = {p.id for p in popped.popped if p.pool in TARGET_ORDERED_POOLS}
    with conn.transaction():
        rows = mark_scheduled(conn, ids, now)
        targets = [
            epoch_s(r["next_visit_queue_position"])
            for r in rows
            if r["id"] in by_target and r["next_visit_queue_position"] is not None
        ]
        if targets:
            advance_queue_position(conn, visit_type, max(targets))
    visit_number = int(now_s * 1000)
    result.orders = [
        VisitOrder(
            origin_id=int(r["id"]),
            url=str(r["url"]),
            visit_type=visit_type,
            arguments=dict(r["extra_loader_arguments"]),
            visit=visit_number,
            scheduled_at=now_s,
        )
        for r in rows
    ]
    if len(rows) < len(ids):
        log.warning("%d popped origins have no stats row", len(ids) - len(rows))
    return result
