"""The rate-only optimum: the age-optimal allocation of the true rates, played on the
simulated changes (pure math).

Each live origin gets the interval ``optimal_interval_s(λ, μ, floor)``
(``app.domain.allocation``), λ its true change rate (0 before a dormant origin
wakes, so its dormant and awake parts are planned apart), the floor
production's. μ is solved once for the measured period: the visits' fixed
parts plus the fetching of the period's changes (and the first visits of the
origins that appear in it) fill the budget, the least of
the policy's recurrent worker time and the workers' capacity over the period
(``multiplier_for_capacity``, each part weighted by its fixed cost and live
time, in the oracle's rate classes). It is null, with the reason, when the floor
alone (every origin at the floor) costs more than that budget.

The allocation is then valued on the simulated changes, with the age the run
measures (``app.simulator.bound.Samples``: at the sample instants, over the
origins live at each, so each origin counts by its live time): each part's
visits are evenly spaced at its interval, the first at a fixed fraction of the
interval from the part's start (the origin's golden-ratio phase, the same on
every run). An origin archived before the period was last visited an interval
before its first visit in it; one that appears during it is first visited when
first listed (never, if never listed), as the oracle visits new origins first,
and every interval after. A visit saves every change made by its time. Visits
are instantaneous and never fail: a yardstick of what spacing by the true rates
gives, not a schedule the workers could keep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.domain.allocation import multiplier_for_capacity, optimal_interval_s
from app.simulator.bound import Samples
from app.simulator.oracle import rate_classes
from app.simulator.world import DAY_S

Array = np.ndarray[tuple[int], np.dtype[np.float64]]

_GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class OptimumOrigin:
    """What the optimum needs of one live origin, in seconds since the epoch."""

    index: int
    """Sets its phase."""
    live_from: float
    live_until: float
    wake_s: float
    """When it starts changing (-inf: from the start)."""
    rate_per_s: float
    """Its true change rate once awake."""
    changes: Array
    fixed_s: float
    """Worker seconds of one visit's fixed part."""
    fetch_s: float
    """Worker seconds of fetching its changes of the measured period."""
    first_visit_s: float | None = None
    """Its first visit, when first listed (inf: never); None when it was archived
    before the measured period."""

    def parts(self) -> list[tuple[float, float, float]]:
        """(start, end, rate) of its dormant and awake parts from its first visit
        (or the period's start)."""
        begin = self.live_from if self.first_visit_s is None else self.first_visit_s
        wake = min(max(self.wake_s, begin), self.live_until)
        parts = [(begin, wake, 0.0), (wake, self.live_until, self.rate_per_s)]
        return [p for p in parts if p[1] > p[0]]


def phase(index: int) -> float:
    """The origin's fixed phase in [0, 1): its index times the golden ratio, modulo 1."""
    return (index * _GOLDEN) % 1.0


def even_visits(start: float, end: float, interval_s: float, offset: float) -> Array:
    """Visits every ``interval_s`` from ``start + offset * interval_s`` until ``end``."""
    if not math.isfinite(interval_s):
        return np.array([], dtype=np.float64)
    count = max(0, math.ceil((end - start) / interval_s - offset))
    visits: Array = start + (offset + np.arange(count, dtype=np.float64)) * interval_s
    return visits


def planned_visits(origin: OptimumOrigin, intervals_s: list[float]) -> Array:
    """The origin's visits, ``intervals_s`` those of its ``parts``: its first visit
    (or, archived before the period, the visit an interval before its first in
    the period), then every part's visits at its interval, from the first visit
    for the first part, else from the origin's phase."""
    parts = origin.parts()
    if not parts:
        return np.array([], dtype=np.float64)
    visits = []
    for k, ((start, end, _), interval) in enumerate(zip(parts, intervals_s, strict=True)):
        offset = 1.0 if k == 0 and origin.first_visit_s is not None else phase(origin.index)
        visits.append(even_visits(start, end, interval, offset))
    first = origin.first_visit_s
    if first is None:
        before = (phase(origin.index) - 1) * intervals_s[0]
        first = parts[0][0] + (before if math.isfinite(before) else 0.0)
    return np.concatenate([[first], *visits])


def realised_age(
    visits: Array, changes: Array, live: tuple[float, float], samples: Samples
) -> float:
    """The origin's weighted age (``Samples``) at the sample instants in ``live``
    (from, until) under ``visits`` (sorted), each saving every change made by its
    time: at an instant t, t less the first change after the last visit by t
    (the first change, before the first visit)."""
    live_from, live_until = live
    visits = np.concatenate([[-math.inf], visits])
    pending = np.append(changes, math.inf)[np.searchsorted(changes, visits, side="right")]
    until = np.minimum(np.append(visits[1:], math.inf), live_until)
    keep = pending < until
    pending, until = pending[keep], until[keep]
    lo = samples.index(np.maximum(pending, live_from))
    hi = np.maximum(lo, samples.index(until))
    ages = (samples.wt[hi] - samples.wt[lo]) - pending * (samples.w[hi] - samples.w[lo])
    return float(np.sum(ages))


def rate_only_optimum(
    origins: Sequence[OptimumOrigin],
    samples: Samples,
    floor_s: float,
    period: tuple[float, float],
    policy_worker_s: float,
    capacity_s: float,
) -> dict[str, Any]:
    """The rate-only optimum's mean age (days) over the measured ``period`` (from,
    until), with its budget: the least of ``policy_worker_s`` and ``capacity_s``
    (the workers' whole time over the period); ``age_days`` None with a
    ``reason`` when the floor alone costs more than the budget. Each origin's
    ``live_from`` is at the period's start at the earliest."""
    period_s = period[1] - period[0]
    budget_s = min(policy_worker_s, capacity_s)
    per_day = DAY_S / period_s if period_s > 0 else math.nan
    out: dict[str, Any] = {
        "age_days": None,
        "reason": None,
        "worker_s_per_day": budget_s * per_day,
        "capped_at_capacity": capacity_s < policy_worker_s,
        "floor_worker_s_per_day": None,
        "multiplier_s2": None,
    }
    if not origins or period_s <= 0 or samples.times.size == 0:
        out["reason"] = "no live origin in the measured period"
        return out
    parts = [(o, *p) for o in origins for p in o.parts()]
    rates = np.array([rate for *_, rate in parts])
    # each part's fixed worker seconds per second of the period at one visit a second
    weights = np.array([o.fixed_s * (end - start) / period_s for o, start, end, _ in parts])
    fetching_s = sum(o.fetch_s for o in origins)
    fetching_s += sum(o.fixed_s for o in origins if o.first_visit_s is not None and o.parts())
    floor_cost_s = fetching_s + float(weights.sum()) * period_s / floor_s
    out["floor_worker_s_per_day"] = floor_cost_s * per_day
    if floor_cost_s > budget_s:
        whose = "the workers' capacity" if budget_s == capacity_s else "the policy's worker time"
        out["reason"] = (
            f"the floor alone (every live origin every {floor_s / DAY_S:.3g} days) needs "
            f"{floor_cost_s * per_day:.0f} worker-s/day, more than {whose}, "
            f"{budget_s * per_day:.0f}"
        )
        return out
    multiplier = multiplier_for_capacity(
        rate_classes(rates, weights), (budget_s - fetching_s) / period_s, floor_s
    )
    out["multiplier_s2"] = multiplier if math.isfinite(multiplier) else None
    total = 0.0
    for o in origins:
        intervals = [optimal_interval_s(rate, multiplier, floor_s) for *_, rate in o.parts()]
        visits = planned_visits(o, intervals)
        total += realised_age(visits, o.changes, (o.live_from, o.live_until), samples)
    out["age_days"] = total
    return out
