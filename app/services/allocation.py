"""Keeping a visit type's age-optimal allocation in step with its capacity.

One step of the scheduler (and of the simulator, which calls the same step):
every ``allocation_interval_s`` it measures how many visits the target-ordered
pools (``no_last_update``, ``up_to_date``) received since the last time, reads
the learned change rates of the origins planned by rate, and solves for the
multiplier μ whose age-optimal intervals spend exactly that capacity
(``app.domain.allocation``). The journal plans each next visit with the μ
stored in ``visit_types``; workers that come or go change the measured
capacity, and with it μ, within one interval.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Iterable
from datetime import datetime

from app.db.connection import DictConnection
from app.db.replan import stats_after
from app.db.scheduling import (
    VisitTypeConfig,
    change_rate_classes,
    floor_only_origins,
    set_age_multiplier,
    visit_type_configs,
)
from app.domain.allocation import (
    corrected_multiplier,
    multiplier_for_capacity,
    past_known_change_cap,
)
from app.domain.placement import PoolName, epoch_s
from app.domain.visit_stats import DAY_S, FLOOR_MARGIN, visit_cost_s
from app.services.context import Context
from queues.mirror import Popped

#: Time constant of the capacity average behind the allocation.
ALLOCATION_SMOOTHING_S = 2 * 86400.0

log = logging.getLogger(__name__)

#: Pools whose picks pay for the visits planned by rate (and by the floor).
PLANNED_POOLS: tuple[PoolName, ...] = ("no_last_update", "up_to_date")
#: Origins sampled (the first by id) to measure a visit type's typical visit cost.
COST_SAMPLE = 5000
#: Fewer origins with a known cost than this: the typical cost is not measured yet.
COST_SAMPLE_MIN = 20


def refresh_allocation(
    conn: DictConnection, ctx: Context, visit_type: str, now: datetime
) -> float | None:
    """Re-solve μ for one visit type if an allocation interval has passed since
    the picks were last counted; return the new μ (None when not yet due)."""
    now_s = epoch_s(now)
    since = ctx.mirror.picks_since(visit_type)
    if since is not None and now_s - since < ctx.tuning.allocation_interval_s:
        return None
    config = visit_type_configs(conn).get(visit_type)
    if config is None:
        return None
    counts, since = ctx.mirror.take_pick_counts(visit_type, now_s)
    if since is None or now_s <= since:
        return None
    picks = sum(counts.get(pool, 0) for pool in PLANNED_POOLS)
    capacity = picks / (now_s - since) * DAY_S
    previous = config.measured_capacity_per_day
    weight = 1.0
    if previous is not None and math.isfinite(previous):
        # Picks come in bursts (a listing's reported changes go first for a
        # while): average them over about a day, or μ swings with every burst
        # and the targets planned in a trough sit at the floor for weeks.
        # Until a time constant has passed, a plain running mean.
        first = ctx.mirror.picks_first(config.name) or since
        weight = max(
            -math.expm1(-(now_s - since) / ALLOCATION_SMOOTHING_S),
            (now_s - since) / max(now_s - first, now_s - since),
        )
        capacity = previous + weight * (capacity - previous)
    floor_s = config.max_interval_s * FLOOR_MARGIN
    late = ctx.mirror.take_lateness(config.name)
    current = config.age_multiplier_s2
    if current is not None and math.isfinite(current):
        # The median: an origin back from a failure's cooldown is picked weeks
        # after its target, and a mean (even a trimmed one) would read those as
        # a lack of capacity and age the archive.
        lateness = statistics.median(late) if late else head_lateness_s(ctx, config, now_s)
        multiplier = corrected_multiplier(current, lateness, weight, floor_s, config.min_interval_s)
    else:
        lateness = 0.0
        prior_s = ctx.tuning.change_rate_prior_units * ctx.settings.ladder_unit_s
        classes = change_rate_classes(conn, config.name, math.log(2) / prior_s * DAY_S)
        for_rates = capacity / DAY_S - floor_only_origins(conn, config.name) / floor_s
        multiplier = multiplier_for_capacity(
            [(rate / DAY_S, count) for rate, count in classes], for_rates, floor_s
        )
    cost_reference = config.visit_cost_reference_s
    if cost_reference is None:
        cost_reference = typical_visit_cost_s(conn, config.name)
    set_age_multiplier(conn, config.name, multiplier, capacity, now, cost_reference)
    log.info(
        "%s: age-optimal allocation: %.0f planned visits/day measured, %d planned picks "
        "late by %.0f s: mu %.3g s^2",
        config.name,
        capacity,
        len(late),
        lateness,
        multiplier,
    )
    return multiplier


def typical_visit_cost_s(conn: DictConnection, visit_type: str) -> float | None:
    """The median visit cost (``visit_cost_s``) of a sample of the visit type's
    origins, or None while fewer than ``COST_SAMPLE_MIN`` of them have one."""
    rows = stats_after(conn, visit_type, 0, COST_SAMPLE)
    costs = [c for _, stats in rows if (c := visit_cost_s(stats.history)) is not None]
    return statistics.median(costs) if len(costs) >= COST_SAMPLE_MIN else None


def head_lateness_s(ctx: Context, config: VisitTypeConfig, now_s: float) -> float:
    """How overdue the first planned origin waiting in the pools is (0 if none
    waits): the lateness when no planned origin was picked at all."""
    drift = schedule_drift_s(ctx, config.name, now_s)
    return max(0.0, drift) if drift is not None else 0.0


def schedule_drift_s(ctx: Context, visit_type: str, now_s: float) -> float | None:
    """Real time minus the target of the first planned origin still waiting
    (None: none waits): how far the workers are behind the planned visits
    (negative: every waiting origin is planned for later)."""
    heads = [ctx.mirror.head_score(visit_type, pool) for pool in PLANNED_POOLS]
    due = [score for score in heads if score is not None]
    return now_s - min(due) if due else None


def overload_margin_s(config: VisitTypeConfig) -> float:
    """The floor's margin (``max_interval`` less the floor) of a visit type
    whose μ is past the cap of known changes (``past_known_change_cap``: the
    workers cannot follow every reported change), 0 otherwise: the pop then
    lets up_to_date origins, whose visits the forge says would find nothing,
    wait for every visit already due (pop.lua). It engages with quiet origins
    first, so that no useless floor visit goes before the reported changes,
    now due by their latest change, that it would leave behind."""
    bound_s = config.max_interval_s - config.max_interval_s * FLOOR_MARGIN
    if not past_known_change_cap(config.age_multiplier_s2, bound_s):
        return 0.0
    return bound_s


def planned_lateness(popped: Iterable[Popped], now_s: float) -> list[float]:
    """How late (s; negative: early) each planned pick of a pop was served."""
    return [now_s - p.score for p in popped if p.pool in PLANNED_POOLS]
