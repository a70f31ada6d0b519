"""Where an origin belongs in the scheduling mirror, derived from its stats.

The Redis mirror holds every enabled origin in exactly one place: its pool
(ready to be picked, ordered by its next visit target), ``inflight`` (sent to
a worker, no result yet) or ``cooling`` (visited recently, resting). This
function is the single definition of that derivation; the listing import, the
journal client and the mirror rebuild all use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from app.domain.cooldown import Cooldowns, eligible_at, in_flight_since

Where = Literal["pool", "inflight", "cooling", "absent"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class MirrorRow:
    """The columns of origin_visit_stats that decide an origin's place."""

    id: int
    visit_type: str
    next_visit_queue_position: datetime | None
    last_visit_status: str | None
    last_visit: datetime | None
    last_final_date: datetime | None
    last_scheduled: datetime | None
    enabled: bool


@dataclass(frozen=True, slots=True)
class Placement:
    """An origin's place: ``score`` orders it there; ``target`` is its next visit target."""

    id: int
    where: Where
    score: float
    target: float


def epoch_s(moment: datetime | None) -> float:
    """Seconds since the Unix epoch (0 for ``None``): the score unit of the mirror."""
    return 0.0 if moment is None else (moment - EPOCH).total_seconds()


def place(row: MirrorRow, now: datetime, cooldowns: Cooldowns) -> Placement:
    """Decide where ``row`` belongs at ``now``."""
    target = epoch_s(row.next_visit_queue_position)
    if not row.enabled:
        return Placement(row.id, "absent", 0.0, target)
    since = in_flight_since(row.last_scheduled, row.last_final_date, now, cooldowns)
    if since is not None:
        return Placement(row.id, "inflight", epoch_s(since), target)
    rest_until = eligible_at(row.last_final_date, row.last_visit_status, cooldowns)
    if rest_until is not None and rest_until > now:
        return Placement(row.id, "cooling", epoch_s(rest_until), target)
    return Placement(row.id, "pool", target, target)
