"""Applying a batch of journal messages: decode, validate, fold, write, re-place."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from app.db.connection import DictConnection
from app.db.scheduling import VisitTypeConfig, visit_type_configs
from app.db.stats import StatsKey, advance_last_visit, lock_stats, queue_positions, write_stats
from app.domain.journal_event import InvalidEvent, VisitStatusEvent
from app.domain.placement import MirrorRow
from app.domain.visit_stats import OriginStats, StatsPolicy, apply_events, keyed_fudge
from app.domain.visit_status import FINAL_STATUSES
from app.kafka.codec import decode_event
from app.services.context import Context
from app.services.mirror_sync import place_rows
from app.services.requests import FinishedRequest, follow_visits
from app.services.visit_types import add_listed_visit_types

#: The fudge of every process's targets: the same for a visit wherever it is applied.
FUDGE = keyed_fudge()


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
    written: list[OriginStats] = field(default_factory=list)
    placed: int = 0
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    beyond_history: Counter[str] = field(default_factory=Counter)
    finished_requests: list[FinishedRequest] = field(default_factory=list)


def decode_batch(payloads: list[bytes | None]) -> tuple[list[VisitStatusEvent], list[Rejected]]:
    """Decode and validate raw values; bad ones are returned with their reason."""
    events: list[VisitStatusEvent] = []
    rejected: list[Rejected] = []
    for index, payload in enumerate(payloads):
        try:
            events.append(decode_event(payload))
        except InvalidEvent as exc:
            rejected.append(Rejected(index, str(exc)))
    return events, rejected


def configs_for(
    conn: DictConnection, events: list[VisitStatusEvent], now: datetime
) -> dict[str, VisitTypeConfig]:
    """The configuration of every visit type, after creating (paused, with the
    defaults, as a listing does) those of ``events`` revisit does not know: the
    reference's journal client folds statuses of any visit type."""
    configs = visit_type_configs(conn)
    if {e.visit_type for e in events} - configs.keys():
        add_listed_visit_types(conn, {e.visit_type for e in events}, now)
        configs = visit_type_configs(conn)
    return configs


def stats_policy(config: VisitTypeConfig, ctx: Context) -> StatsPolicy:
    """The feedback-loop knobs of one visit type."""
    return StatsPolicy(
        ladder_unit=timedelta(seconds=ctx.settings.ladder_unit_s),
        min_interval=timedelta(seconds=config.min_interval_s),
        max_interval=timedelta(seconds=config.max_interval_s),
        max_failures_in_a_row=ctx.tuning.max_failures_in_a_row,
        spacing=config.spacing,
        age_multiplier_s2=config.age_multiplier_s2,
        prior_interval=timedelta(
            seconds=ctx.tuning.change_rate_prior_units * ctx.settings.ladder_unit_s
        ),
        visit_cost_reference_s=config.visit_cost_reference_s,
        known_rate_per_s=ctx.known_rate_per_s,
    )


def write_batch(
    conn: DictConnection,
    ctx: Context,
    events: list[VisitStatusEvent],
    configs: dict[str, VisitTypeConfig],
    now: datetime,
) -> tuple[BatchOutcome, list[MirrorRow]]:
    """Fold ``events`` into the stats; return the rows to re-place in the mirror.

    Origins with a final status are locked, refolded and written in one
    transaction; the others only move ``last_visit`` forward, in one statement.

    Every origin with a final status is rewritten and re-placed even when the
    fold gives what is stored: after a crash between the transaction and the
    Redis update, the replayed batch is what repairs the mirror.
    """
    outcome = BatchOutcome(applied=events)
    by_key: dict[StatsKey, list[VisitStatusEvent]] = {}
    refolded: set[StatsKey] = set()
    for event in events:
        key = (event.origin, event.visit_type)
        group = by_key.get(key)
        if group is None:
            by_key[key] = [event]
        else:
            group.append(event)
        if event.status in FINAL_STATUSES:
            refolded.add(key)
    refold = sorted(refolded)
    # Only moving last_visit forward commutes with everything: commit it apart,
    # without holding the locks of the refolded rows.
    advance_last_visit(
        conn,
        {
            k: evs[0].date if len(evs) == 1 else max([e.date for e in evs])
            for k, evs in by_key.items()
            if k not in refolded
        },
    )
    policies = {name: stats_policy(config, ctx) for name, config in configs.items()}
    with conn.transaction():
        current = lock_stats(conn, refold)
        positions = queue_positions(conn)
        for key in refold:
            url, visit_type = key
            before = current.get(key) or OriginStats(url=url, visit_type=visit_type)
            update = apply_events(
                before, by_key[key], positions.get(visit_type, now), policies[visit_type], FUDGE
            )
            outcome.written.append(update.stats)
            for result in update.new_outcomes:
                outcome.outcomes[(result, visit_type)] += 1
            if update.beyond_history:
                outcome.beyond_history[visit_type] += update.beyond_history
        mirror_rows = write_stats(conn, outcome.written)
        outcome.finished_requests = follow_visits(conn, events)
    return outcome, mirror_rows


def apply_events_batch(
    conn: DictConnection,
    ctx: Context,
    events: list[VisitStatusEvent],
    configs: dict[str, VisitTypeConfig],
    now: datetime,
) -> BatchOutcome:
    """Write a batch of events to Postgres, then re-place its origins in Redis."""
    outcome, rows = write_batch(conn, ctx, events, configs, now)
    outcome.placed = place_rows(ctx, rows, now)
    return outcome
