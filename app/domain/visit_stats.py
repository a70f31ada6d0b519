"""How a visit result moves an origin's statistics and its next visit target.

This is the feedback loop of seed 000: applied by the journal client to each
origin_visit_status message, and by the simulator under a simulated clock.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from app.domain import ladder
from app.domain.journal_event import SUCCESS_STATUSES, VisitStatusEvent


@dataclass(frozen=True, slots=True)
class StatsPolicy:
    """The knobs of the feedback loop, per visit type."""

    ladder_unit: timedelta
    min_interval: timedelta
    max_interval: timedelta
    max_failures_in_a_row: int = 3

    @property
    def top_index(self) -> int:
        """Highest ladder index allowed by ``max_interval``."""
        return ladder.max_index(self.max_interval / self.ladder_unit)


@dataclass(frozen=True, slots=True)
class OriginStats:
    """The scheduling state of one (origin, visit type): a row of origin_visit_stats."""

    url: str
    visit_type: str
    last_successful: datetime | None = None
    last_visit: datetime | None = None
    last_visit_status: str | None = None
    last_snapshot: bytes | None = None
    next_visit_queue_position: datetime | None = None
    next_position_offset: int = ladder.DEFAULT_INDEX
    successive_visits: int = 0
    last_visit_number: int | None = None
    last_final_date: datetime | None = None
    eventful_visits: int = 0
    uneventful_visits: int = 0
    failed_visits: int = 0
    failures_in_a_row: int = 0
    last_duration_s: float | None = None
    disabled_for_failures: bool = False


def outcome(stats: OriginStats, event: VisitStatusEvent) -> str:
    """Classify a final status: 'eventful', 'uneventful' or 'failed'."""
    if event.status in SUCCESS_STATUSES:
        changed = event.snapshot is not None and event.snapshot != stats.last_snapshot
        return "eventful" if changed else "uneventful"
    return "failed"


def _is_newer(stats: OriginStats, event: VisitStatusEvent) -> bool:
    if stats.last_final_date is None:
        return True
    applied = (stats.last_final_date, stats.last_visit_number or 0)
    return (event.date, event.visit) > applied


def apply_event(
    stats: OriginStats,
    event: VisitStatusEvent,
    queue_position: datetime,
    policy: StatsPolicy,
    rng: random.Random,
) -> OriginStats:
    """Return the stats after one journal event.

    Non-final statuses only advance ``last_visit``. A final status older than
    the last one applied changes nothing, so replays and duplicates are harmless.
    """
    last_visit = event.date if stats.last_visit is None else max(stats.last_visit, event.date)
    if not event.is_final:
        return replace(stats, last_visit=last_visit)
    if not _is_newer(stats, event):
        return stats
    result = outcome(stats, event)
    same = event.status == stats.last_visit_status
    successive = stats.successive_visits + 1 if same else 1
    common = replace(
        stats,
        last_visit=last_visit,
        last_visit_status=event.status,
        last_visit_number=event.visit,
        last_final_date=event.date,
        successive_visits=successive,
        last_duration_s=event.duration_s if event.duration_s is not None else stats.last_duration_s,
    )
    base = queue_position
    if result == "failed":
        failures = stats.failures_in_a_row + 1
        current = stats.next_visit_queue_position or base
        return replace(
            common,
            failed_visits=stats.failed_visits + 1,
            failures_in_a_row=failures,
            disabled_for_failures=failures >= policy.max_failures_in_a_row,
            next_visit_queue_position=max(current, base) + policy.min_interval,
        )
    step = ladder.EVENTFUL_STEP if result == "eventful" else ladder.UNEVENTFUL_STEP
    index = ladder.clamp_index(stats.next_position_offset + step, policy.top_index)
    interval = policy.ladder_unit * ladder.interval_units(index)
    fudge = rng.uniform(0.9, 1.1)
    return replace(
        common,
        last_successful=event.date,
        last_snapshot=event.snapshot if event.snapshot is not None else stats.last_snapshot,
        eventful_visits=stats.eventful_visits + (result == "eventful"),
        uneventful_visits=stats.uneventful_visits + (result == "uneventful"),
        failures_in_a_row=0,
        next_position_offset=index,
        next_visit_queue_position=base + interval * fudge,
    )


def apply_events(
    stats: OriginStats,
    events: Iterable[VisitStatusEvent],
    queue_position: datetime,
    policy: StatsPolicy,
    rng: random.Random,
) -> OriginStats:
    """Apply the events of one origin in their natural order (date, visit)."""
    for event in sorted(events, key=lambda e: e.order_key):
        stats = apply_event(stats, event, queue_position, policy, rng)
    return stats
