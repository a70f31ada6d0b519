"""What ``revisit status`` shows: per visit type, where every origin is, how
deep each lane's queue is, how fast visits end and how many fail.

Snapshots are read by ``app.cli.status``; rates come from the difference
between two snapshots (this module: no I/O).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from app.domain.lanes import Lane
from app.domain.placement import POOLS
from app.domain.visit_status import FINAL_STATUSES, SUCCESS_STATUSES
from queues.dramatiq_queues import QueueDepth

#: The final statuses counted as failed visits: every one but a success.
FAILED = tuple(sorted(FINAL_STATUSES - SUCCESS_STATUSES))


@dataclass(frozen=True)
class LaneStatus:
    """One lane's queue and workers."""

    depth: QueueDepth
    worker_threads: int


@dataclass(frozen=True)
class VisitTypeStatus:
    """A snapshot of one visit type."""

    visit_type: str
    places: dict[str, int]
    lanes: dict[Lane, LaneStatus]
    outcomes: dict[str, int]
    requests: dict[str, int]
    drift_s: float | None

    @property
    def dead(self) -> int:
        """Dead letters across its lanes."""
        return sum(lane.depth.dead for lane in self.lanes.values())


@dataclass(frozen=True)
class Snapshot:
    """Every visit type at one moment."""

    at: datetime
    visit_types: list[VisitTypeStatus] = field(default_factory=list)
    #: What could not be read (a mirror key of the wrong type), one line each.
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Rates:
    """Visits ended per second and the failed share, between two snapshots."""

    visits_per_s: float
    failed_share: float


def rates(before: VisitTypeStatus, after: VisitTypeStatus, seconds: float) -> Rates | None:
    """Rates of one visit type between two snapshots ``seconds`` apart (None: unknown)."""
    if seconds <= 0:
        return None
    ended = {k: after.outcomes.get(k, 0) - before.outcomes.get(k, 0) for k in after.outcomes}
    total = sum(max(0, n) for n in ended.values())
    failed = sum(max(0, ended.get(k, 0)) for k in FAILED)
    return Rates(total / seconds, failed / total if total else 0.0)


def pool_total(status: VisitTypeStatus) -> int:
    """Origins waiting in the four pools."""
    return sum(status.places.get(pool, 0) for pool in POOLS)
