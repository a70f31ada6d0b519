"""Applying a batch of journal messages: decode, validate, fold, write, re-place."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from app.context import Context
from app.db.connection import DictConnection
from app.db.scheduling import VisitTypeConfig
from app.db.stats import lock_stats, queue_positions, write_stats
from app.domain.journal_event import InvalidEvent, VisitStatusEvent, event_from_dict
from app.domain.placement import Placement, place
from app.domain.visit_stats import OriginStats, StatsPolicy, apply_events
from app.journal_codec import UndecodableMessage, decode
from app.requests import FinishedRequest, follow_visits


@dataclass(frozen=True)
class Rejected:
    """A message that could not be applied, and why (the field it names)."""

    index: int
    reason: str


@dataclass
class BatchOutcome:
    """What one batch did."""

    applied: list[VisitStatusEvent] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    changed: list[OriginStats] = field(default_factory=list)
    placed: int = 0
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    finished_requests: list[FinishedRequest] = field(default_factory=list)


def decode_batch(
    payloads: list[bytes | None], known_visit_types: frozenset[str]
) -> tuple[list[VisitStatusEvent], list[Rejected]]:
    """Decode and validate raw values; bad ones are returned with their reason."""
    events: list[VisitStatusEvent] = []
    rejected: list[Rejected] = []
    for index, payload in enumerate(payloads):
        try:
            events.append(event_from_dict(decode(payload), known_visit_types))
        except (UndecodableMessage, InvalidEvent) as exc:
            rejected.append(Rejected(index, str(exc)))
    return events, rejected


def stats_policy(config: VisitTypeConfig, ctx: Context) -> StatsPolicy:
    """The feedback-loop knobs of one visit type."""
    return StatsPolicy(
        ladder_unit=timedelta(seconds=ctx.settings.ladder_unit_s),
        min_interval=timedelta(seconds=config.min_interval_s),
        max_interval=timedelta(seconds=config.max_interval_s),
        max_failures_in_a_row=ctx.settings.max_failures_in_a_row,
    )


def apply_events_batch(
    conn: DictConnection,
    ctx: Context,
    events: list[VisitStatusEvent],
    configs: dict[str, VisitTypeConfig],
    now: datetime,
    rng: random.Random,
) -> BatchOutcome:
    """Fold ``events`` into the stats in one transaction, then re-place changed origins."""
    outcome = BatchOutcome(applied=events)
    by_key: dict[tuple[str, str], list[VisitStatusEvent]] = defaultdict(list)
    for event in events:
        by_key[(event.origin, event.visit_type)].append(event)
    with conn.transaction():
        current = lock_stats(conn, sorted(by_key))
        positions = queue_positions(conn)
        for key, key_events in sorted(by_key.items()):
            before = current.get(key) or OriginStats(url=key[0], visit_type=key[1])
            policy = stats_policy(configs[key[1]], ctx)
            after = apply_events(before, key_events, positions.get(key[1], now), policy, rng)
            if after != before:
                outcome.changed.append(after)
                _count_outcomes(outcome.outcomes, before, after)
        mirror_rows = write_stats(conn, outcome.changed)
        outcome.finished_requests = follow_visits(conn, events)
    by_type: dict[str, list[Placement]] = defaultdict(list)
    for row in mirror_rows:
        by_type[row.visit_type].append(place(row, now, ctx.cooldowns))
    for visit_type, placements in by_type.items():
        outcome.placed += ctx.mirror.place(visit_type, placements)
    return outcome


def _count_outcomes(
    counts: Counter[tuple[str, str]], before: OriginStats, after: OriginStats
) -> None:
    vt = after.visit_type
    counts[("eventful", vt)] += after.eventful_visits - before.eventful_visits
    counts[("uneventful", vt)] += after.uneventful_visits - before.uneventful_visits
    counts[("failed", vt)] += after.failed_visits - before.failed_visits
