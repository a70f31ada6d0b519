"""How visit results move an origin's statistics and its next visit target.

This is the feedback loop of seed 000, applied by the journal client to the
origin_visit_status messages of one origin in a batch (and by a simulator under
a simulated clock). The result depends only on the set of statuses received,
never on their order or on duplicates (DESIGN invariant 3):

- the tally (ladder index, counts, failures in a row...) is a fold, in visit
  order, of the final visits (``visit_history``);
- the fudge of a target is a function of (origin, visit type, visit), not a
  draw, so refolding after a late status reproduces it;
- the target is anchored at the scheduler's queue position when the newest
  final visit was first recorded (``next_visit_anchor``): a late status of an
  older visit may change the interval, never the anchor.

Two ways to space visits, per visit type (``StatsPolicy.spacing``):

- ``ladder``: seed 000's interval ladder (eventful halves the interval,
  uneventful grows it), in queue-position time;
- ``age_optimal``: the age-optimal interval of the origin's learned change
  rate (``app.domain.change_rate``, ``app.domain.allocation``) under the
  visit type's current multiplier, in real time from the newest final visit;
  an origin whose forge reports ``last_update`` waits for the lister to
  report a change (the lagging pool), so its target is only the floor,
  ``max_interval``, unless the workers have room and its visits show it changes faster
  than the lister reports (``_blind_interval_s``).
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

import msgspec

from app.domain import ladder
from app.domain.allocation import (
    known_change_delay_s,
    optimal_interval_s,
    past_known_change_cap,
)
from app.domain.change_rate import estimate_per_s, optimism
from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_history import (
    FinalVisit,
    Outcome,
    Tally,
    VisitHistory,
    compact,
    fold_in_order,
    fold_of,
    merge,
    refold,
    with_fold,
)
from app.domain.visit_status import FINAL_STATUSES, is_success

FUDGE_LOW = 0.9
FUDGE_HIGH = 1.1
DEFAULT_HISTORY_LENGTH = 8
DAY_S = 86400.0
#: Share of max_interval planned at most (the rest is margin for the queue's wait).
FLOOR_MARGIN = 0.9
#: The most an origin's visit cost may weigh its multiplier, up or down.
MAX_COST_WEIGHT = 50.0
#: An origin whose lister reports last_update is visited without waiting for a
#: reported change only while at most this share of its recent visits (decayed,
#: ``change_rate.DECAY``) found nothing ...
BLIND_USELESS_SHARE = 0.02
#: ... and it showed at least this many changes (decayed) ...
BLIND_MIN_CHANGES = 3.0
#: ... and the common interval √(2μ) is at most this many times min_interval.
BLIND_ROOM = 1.5
Spacing = Literal["ladder", "age_optimal"]

Fudge = Callable[[str, str, int], float]
"""The fudge factor of the target after visit (url, visit_type, visit number)."""


def keyed_fudge(key: bytes = b"revisit") -> Fudge:
    """A fudge in [0.9, 1.1) drawn from a keyed hash of (origin, visit type, visit).

    It spreads the visits of origins listed together (seed 000) like a random
    draw, but gives the same factor every time a visit is (re)applied, in any
    process, so replays and late statuses reproduce the stats exactly.
    """

    keyed = hashlib.blake2b(digest_size=8, key=key)  # copied: keyed once, not per call

    def fudge(url: str, visit_type: str, visit: int) -> float:
        hashed = keyed.copy()
        hashed.update(f"{url}\0{visit_type}\0{visit}".encode())
        return FUDGE_LOW + (FUDGE_HIGH - FUDGE_LOW) * int.from_bytes(hashed.digest()) / 2**64

    return fudge


@dataclass(frozen=True, slots=True)
class StatsPolicy:
    """The knobs of the feedback loop, per visit type."""

    ladder_unit: timedelta
    min_interval: timedelta
    max_interval: timedelta
    max_failures_in_a_row: int = 3
    history_length: int = DEFAULT_HISTORY_LENGTH
    spacing: Spacing = "ladder"
    age_multiplier_s2: float | None = None
    """μ of the age-optimal allocation (``app.domain.allocation``); None until the
    scheduler has measured the capacity, when the ladder spaces the visits."""
    prior_interval: timedelta = timedelta(days=30)
    """Scale of the change-rate prior: a new origin is expected to change about
    once per this interval (``app.domain.change_rate``)."""
    visit_cost_reference_s: float | None = None
    """The typical worker time of a visit (s): an origin whose visits cost a times
    this is planned with a times μ (``visit_cost_weight``). None: all alike."""
    known_rate_per_s: Callable[[str], float | None] | None = None
    """An origin's true change rate by URL, where it is known beforehand (the
    simulator's ``oracle`` baseline, whose gap to the learned rates is what
    learning loses); planned with as it is. None: every rate is learned."""
    top_index: int = field(init=False)
    """Highest ladder index allowed by ``max_interval``."""

    def __post_init__(self) -> None:
        top = ladder.max_index(self.max_interval / self.ladder_unit)
        object.__setattr__(self, "top_index", top)


class OriginStats(msgspec.Struct, frozen=True):
    """The scheduling state of one (origin, visit type): a row of origin_visit_stats.

    A frozen msgspec Struct (as ``Tally``): built once or twice per origin of a
    journal batch, where a frozen dataclass set each field with ``object.__setattr__``.
    """

    url: str
    visit_type: str
    tally: Tally = msgspec.field(default_factory=Tally)
    history: VisitHistory = msgspec.field(default_factory=VisitHistory)
    last_visit: datetime | None = None
    next_visit_queue_position: datetime | None = None
    next_visit_anchor: datetime | None = None
    disabled_for_failures: bool = False
    reports_last_update: bool = False
    """Whether the forge reports the origin's last_update (read, not written)."""
    change_rate_per_day: float | None = None
    """The learned change rate (``app.domain.change_rate``), for operators."""
    reported_change_delay_s: float | None = None
    """age_optimal: how long after its first missed change the origin is due
    once its forge reports the change (``change_delay_s``); None otherwise."""


@dataclass(frozen=True, slots=True)
class StatsUpdate:
    """The stats after a batch of events, and what the batch did to them."""

    stats: OriginStats
    finals_changed: bool
    """Whether the final visits changed (else only ``last_visit`` may have moved)."""
    new_outcomes: tuple[Outcome, ...] = ()
    """Outcomes of the visits this batch made known for the first time."""
    beyond_history: int = 0
    """Final statuses older than the history: duplicates or very late, not applied."""


def next_target(
    stats: OriginStats,
    tally: Tally,
    anchor: datetime,
    policy: StatsPolicy,
    fudge: Fudge,
    rate_per_s: float,
    multiplier_s2: float | None,
) -> datetime:
    """Anchor + fudged ladder interval after a success; + the minimum interval after a
    failure (a transient problem should be retried soon, seed 000). With the
    age_optimal spacing, the interval comes from ``rate_per_s``, the learned rate,
    and ``multiplier_s2``, the origin's multiplier (``planning_multiplier_s2``),
    and both are counted in real time from the newest final visit, not from the
    anchor."""
    if not is_success(tally.last_visit_status) or tally.last_visit_number is None:
        if policy.spacing != "age_optimal" or tally.last_final_date is None:
            return anchor + policy.min_interval
        # Real time from the failed visit, as after a success: the queue
        # position runs ahead of real time (by a month in the first weeks of a
        # deployment, when the ladder set the targets), and a retry anchored
        # there would wait that long.
        retry = tally.last_final_date + policy.min_interval
        if tally.last_successful is not None:
            # The floor counts from the last success. A visit that failed at or
            # past the floor puts the origin at risk of max_interval: it is due
            # the floor's margin before its floor, so that it goes before work
            # due up to that margin earlier (after a forge outage, the backlog).
            floor_at = tally.last_successful + _floor(policy)
            if floor_at <= tally.last_final_date:
                return floor_at - (policy.max_interval - _floor(policy))
            return min(retry, floor_at)
        return retry
    factor = fudge(stats.url, stats.visit_type, tally.last_visit_number)
    interval = policy.ladder_unit * ladder.interval_units(tally.next_position_offset)
    if policy.spacing == "age_optimal":
        assert tally.last_final_date is not None
        if tally.last_visit_status == "partial" and tally.last_eventful == tally.last_final_date:
            # Cut short (the loader's time limit) after saving something: the
            # rest is still to fetch, and each visit planned at the learned rate
            # would leave the origin further behind. Followed up as a failure
            # is retried; a partial visit that saved nothing new is planned as
            # usual, so an origin that always ends partial is not hammered.
            return tally.last_final_date + policy.min_interval
        if multiplier_s2 is not None:
            interval = _age_optimal_interval(stats, tally, policy, rate_per_s, multiplier_s2)
        # Real time from the visit, never the queue position: until the first
        # multiplier is measured the ladder's interval stands in, and the
        # re-planning sweep (``replanned_target``) corrects it once μ is known.
        return tally.last_final_date + min(interval * factor, _floor(policy))
    return anchor + interval * factor


def _floor(policy: StatsPolicy) -> timedelta:
    """The longest interval planned: ``max_interval`` less a margin for the wait in
    the queue, so that every live origin is visited at least once per max_interval."""
    return policy.max_interval * FLOOR_MARGIN


def _age_optimal_interval(
    stats: OriginStats, tally: Tally, policy: StatsPolicy, rate_per_s: float, multiplier_s2: float
) -> timedelta:
    """The age-optimal interval of the learned rate, made optimistic while the
    history is thin. For an origin whose lister reports its changes, the floor
    (the lagging pool brings it back), unless ``_blind_interval_s`` gives one."""
    if stats.reports_last_update:
        blind_s = _blind_interval_s(tally, policy, rate_per_s, multiplier_s2)
        return policy.max_interval if blind_s is None else timedelta(seconds=blind_s)
    known = policy.known_rate_per_s is not None
    rate = rate_per_s if known else rate_per_s * optimism(tally.change_observations)
    interval_s = optimal_interval_s(rate, multiplier_s2, policy.max_interval.total_seconds())
    return timedelta(seconds=max(interval_s, 0.0))


def _blind_interval_s(
    tally: Tally, policy: StatsPolicy, rate_per_s: float, multiplier_s2: float
) -> float | None:
    """The age-optimal interval (no optimism) at which an origin whose lister
    reports last_update is visited without waiting for a reported change, or
    None (it waits). Only while the workers have room (μ at most
    ``BLIND_ROOM`` times min_interval's clamp, ``√(2μ)`` measured: a visit then
    displaces no other), its own recent visits nearly all found a change, and
    the rate expects one within the interval. Each visit that finds nothing
    raises its useless share past ``BLIND_USELESS_SHARE`` and holds it to the
    lister's reports until enough eventful visits follow, so a learned rate that
    is wrong (bursts, a slowdown) costs a bounded share of its visits."""
    mu = policy.age_multiplier_s2
    obs = tally.change_observations
    if (
        mu is None
        or past_known_change_cap(mu, BLIND_ROOM * policy.min_interval.total_seconds())
        or obs.changed < BLIND_MIN_CHANGES
        or obs.unchanged > BLIND_USELESS_SHARE * (obs.changed + obs.unchanged)
    ):
        return None
    interval_s = optimal_interval_s(rate_per_s, multiplier_s2, policy.max_interval.total_seconds())
    return interval_s if rate_per_s * interval_s >= 1.0 else None


def visit_cost_s(history: VisitHistory) -> float | None:
    """What a visit of the origin costs the workers when it fetches nothing: the
    median duration its loader reported for its recent uneventful visits (a
    successful visit that found the snapshot of the one before). A visit's time
    grows with the changes it fetches, and those are fetched however often the
    origin is visited: what frequent visits add is this fixed part. None when
    no uneventful visit reported a duration (an origin that changes at every
    visit counts as typical)."""
    durations = []
    previous = history.base.last_snapshot
    for v in history.recent:
        if not is_success(v.status):
            continue
        if v.snapshot is not None and v.snapshot == previous and (v.duration_s or 0) > 0:
            durations.append(float(v.duration_s or 0))
        previous = v.snapshot if v.snapshot is not None else previous
    return statistics.median(durations) if durations else None


def visit_cost_weight(cost_s: float | None, reference_s: float | None) -> float:
    """The factor of an origin's multiplier for its visit cost: over worker time,
    the optimum is h(λI) = p a λ² with p the price of a worker second, so an
    origin whose visits cost a_i plans with μ a_i / ā, ā the typical cost
    (Cho & Garcia-Molina's allocation with costs).
    Bounded to [1/MAX_COST_WEIGHT, MAX_COST_WEIGHT]; 1 when a cost is unknown."""
    if cost_s is None or reference_s is None or reference_s <= 0:
        return 1.0
    return max(1 / MAX_COST_WEIGHT, min(MAX_COST_WEIGHT, cost_s / reference_s))


def planning_multiplier_s2(history: VisitHistory, policy: StatsPolicy) -> float | None:
    """The multiplier an origin is planned with: μ weighed by the visit cost of
    ``history`` (``visit_cost_weight``). None under another spacing or before
    the first multiplier (the ladder then spaces the visits)."""
    if policy.spacing != "age_optimal" or policy.age_multiplier_s2 is None:
        return None
    if policy.visit_cost_reference_s is None:  # every cost weighs 1
        return policy.age_multiplier_s2
    weight = visit_cost_weight(visit_cost_s(history), policy.visit_cost_reference_s)
    return policy.age_multiplier_s2 * weight


def change_delay_s(
    policy: StatsPolicy, rate_per_s: float, multiplier_s2: float | None
) -> float | None:
    """How long after its first missed change the origin is due when its forge
    reports a change (the lagging pool's due time, ``app.domain.placement``):
    the age-optimal delay of its learned rate under its multiplier
    (``planning_multiplier_s2``) capped at its lower clamp, so at most
    ``min_interval`` (known changes before guesses), and past the cap of
    ``known_change_bound`` the delay from the latest change
    (``app.domain.allocation``). None without a multiplier (the lagging pool
    is then ordered by lag)."""
    if multiplier_s2 is None:
        return None
    floor_s = _floor(policy).total_seconds()
    bound_s = known_change_bound(policy).total_seconds()
    soon_s = policy.min_interval.total_seconds()
    return known_change_delay_s(rate_per_s, multiplier_s2, floor_s, bound_s, soon_s)


def known_change_bound(policy: StatsPolicy) -> timedelta:
    """The longest a reported change waits, whatever the load: the floor's
    margin, ``max_interval`` less the floor (the wait in the queue the floor
    already allows for)."""
    return policy.max_interval - _floor(policy)


def replanned_target(
    stats: OriginStats, policy: StatsPolicy, fudge: Fudge
) -> tuple[datetime, float | None] | None:
    """The next visit target the age-optimal spacing gives ``stats`` under the
    policy's current multiplier, with the delay after a reported change
    (``change_delay_s``), or None when it plans nothing for them (another
    spacing, no multiplier yet, or a last visit that was no success).

    The journal plans each target with the multiplier of the moment; as the
    capacity or the rates move, the scheduler sweeps the table with this, so
    that no target keeps the plan of a multiplier long gone (e.g. those made
    before the first one was measured)."""
    if policy.spacing != "age_optimal" or policy.age_multiplier_s2 is None:
        return None
    tally = fold_of(stats.history, policy.top_index)
    if not is_success(tally.last_visit_status) or tally.last_final_date is None:
        return None
    anchor = stats.next_visit_anchor or tally.last_final_date
    rate = learned_rate_per_s(tally, policy, stats.url)
    multiplier = planning_multiplier_s2(stats.history, policy)
    target = next_target(stats, tally, anchor, policy, fudge, rate, multiplier)
    return target, change_delay_s(policy, rate, multiplier)


def learned_rate_per_s(tally: Tally, policy: StatsPolicy, url: str) -> float:
    """The learned change rate of an origin, per second (the estimate, not the
    optimistic rate planned with), or its known one (``known_rate_per_s``)."""
    if policy.known_rate_per_s is not None:
        known = policy.known_rate_per_s(url)
        if known is not None:
            return known
    return estimate_per_s(tally.change_observations, policy.prior_interval.total_seconds())


def apply_events(
    stats: OriginStats,
    events: Iterable[VisitStatusEvent],
    queue_position: datetime,
    policy: StatsPolicy,
    fudge: Fudge,
) -> StatsUpdate:
    """Fold a batch of statuses of one origin into its stats.

    ``created``/``ongoing`` statuses only advance ``last_visit``. Final ones join
    the visit history: folded once onto its kept fold when they are newer than
    every visit it holds (the common case), else everything is refolded from it.
    """
    last_visit = stats.last_visit
    finals = []
    for event in events:
        if last_visit is None or event.date > last_visit:
            last_visit = event.date
        if event.status in FINAL_STATUSES:
            finals.append(FinalVisit.from_event(event))
    top = policy.top_index
    in_order = fold_in_order(stats.history, finals, top)
    if in_order is not None:
        before, tally, merged, outcomes = in_order
        after = _folded(stats, before, tally, merged, last_visit, queue_position, policy, fudge)
        return StatsUpdate(after, True, tuple(outcomes), 0)
    merged, beyond = merge(stats.history, finals)
    if merged == stats.history:
        return _unchanged(stats, last_visit, policy, beyond)
    before, tally, outcomes = refold(stats.history, merged, top)
    known = {v.visit for v in stats.history.recent}
    new_outcomes = tuple(
        o for v, o in zip(merged.recent, outcomes, strict=True) if v.visit not in known
    )
    merged = with_fold(merged, tally, top)
    after = _folded(stats, before, tally, merged, last_visit, queue_position, policy, fudge)
    return StatsUpdate(after, True, new_outcomes, beyond)


def _unchanged(
    stats: OriginStats, last_visit: datetime | None, policy: StatsPolicy, beyond: int
) -> StatsUpdate:
    """Nothing new: the row is rewritten as it was (its learned rate included),
    keeping its history's fold."""
    top = policy.top_index
    tally = fold_of(stats.history, top)
    visited = tally.last_visit_number is not None
    rate_per_s = learned_rate_per_s(tally, policy, stats.url)
    kept = OriginStats(
        stats.url,
        stats.visit_type,
        stats.tally,
        with_fold(stats.history, tally, top),
        last_visit,
        stats.next_visit_queue_position,
        stats.next_visit_anchor,
        stats.disabled_for_failures,
        stats.reports_last_update,
        rate_per_s * DAY_S if visited else None,
        change_delay_s(policy, rate_per_s, planning_multiplier_s2(stats.history, policy)),
    )
    return StatsUpdate(kept, False, (), beyond)


def _folded(
    stats: OriginStats,
    before: Tally,
    tally: Tally,
    merged: VisitHistory,
    last_visit: datetime | None,
    queue_position: datetime,
    policy: StatsPolicy,
    fudge: Fudge,
) -> OriginStats:
    """The stats once ``merged`` replaces the history of ``stats`` (``before`` and
    ``tally`` the folds of the old and the new history): anchor, failure streak,
    learned rate and target, planned from it."""
    anchor = stats.next_visit_anchor
    if anchor is None or merged.newest_visit() != stats.history.newest_visit():
        anchor = queue_position
    disabled = stats.disabled_for_failures
    if tally.failures_in_a_row != before.failures_in_a_row:
        # Only a change of the failure streak decides: a listing that re-enabled
        # the origin is not overruled by a replay of the same failures.
        disabled = tally.failures_in_a_row >= policy.max_failures_in_a_row
    rate_per_s = learned_rate_per_s(tally, policy, stats.url)
    history = compact(merged, policy.history_length, policy.top_index)
    # planned from the history just folded (its visits' costs included)
    multiplier = planning_multiplier_s2(history, policy)
    target = next_target(stats, tally, anchor, policy, fudge, rate_per_s, multiplier)
    return OriginStats(
        stats.url,
        stats.visit_type,
        tally,
        history,
        last_visit,
        target,
        anchor,
        disabled,
        stats.reports_last_update,
        rate_per_s * DAY_S,
        change_delay_s(policy, rate_per_s, multiplier),
    )
