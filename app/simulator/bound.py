"""A clairvoyant lower bound on the mean age a run's workers could reach (pure math).

The model (``clairvoyant_bound``): a scheduler that knows every origin's exact
change times, gets one free visit of each origin when it is first listed (at
the start of the measured period for the origins listed before it), and may
spend the recurrent workers' whole time over the measured period (plus what
the request workers spent, whose visits also archive changes). A visit is
instantaneous and saves every change made by its time; it costs the visit's
fixed part, ``scale * size * base_s``, plus, for each change it saves, that
change's commits at ``per_commit_s``, at most what the loader's cap allows
(``cap_s - base_s``). Ages are measured as the run measures them: at the
sample instants, averaged over the live origins of each sample.

Why it is a bound: every real schedule is a schedule of this model that costs
no more and ages no less. A real visit started at s saves at most the changes
made by s (not its end), cut by the cap it saves whole changes whose commits
it paid for (or one change, for the cap's time); failures, cooldowns, queue
waits and the lister's delay only take away; the free visits at listing only
help. Within the model, a visit only matters at the first sample instant after
a change (later ones save the same changes and leave more age), so each
origin's schedules are subsets of those instants: a dynamic programme over
them (``_Packed.solve``) gives each origin's least age + nu * worker time, and
by weak Lagrangian duality, for any price nu ≥ 0,

    Σ_i min_schedule (age_i + nu cost_i) - nu * budget  ≤  the least mean age

of any schedule within the budget. The bound is the largest such value over
the nu tried (bisected on the dual's slope).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.simulator.world import DAY_S, Origin

Array = np.ndarray[tuple[int], np.dtype[np.float64]]

#: Bisection steps over log nu.
_SEARCH_STEPS = 24
_LOG_NU_RANGE = (-16.0, 2.0)


@dataclass(frozen=True)
class OriginCase:
    """What the bound needs of one live origin, in seconds since the epoch."""

    free_at: float
    """The free visit: first listing, or the start of the measured period (inf: never listed)."""
    live_from: float
    live_until: float
    first_pending: float
    """The first change the free visit does not save (inf: none) when it is never listed."""
    group_first: Array
    """Per group of changes (those whose first sample instant is the same): the first."""
    group_visit: Array
    """... that sample instant, where a visit saves the group."""
    group_cost_s: Array
    """... the worker seconds of fetching the group's changes."""
    fixed_s: float
    """Worker seconds of one visit's fixed part."""


class Samples:
    """The sample instants of the measured period and their weights: 1 / (count
    of samples * live origins at the sample), so that Σ weight * age over the
    origins and samples is the run's mean age."""

    def __init__(self, times: Array, live: Array) -> None:
        self.times = times
        weights = np.where(live > 0, 1.0 / (len(times) * np.maximum(live, 1)), 0.0) / DAY_S
        self.w = np.concatenate([[0.0], np.cumsum(weights)])
        self.wt = np.concatenate([[0.0], np.cumsum(weights * times)])

    def index(self, t: Any) -> Any:
        """How many sample instants are before ``t``."""
        return np.searchsorted(self.times, t, side="left")

    def age(self, since: Array | float, until: Array | float) -> Any:
        """Weighted age of a change pending from ``since`` over the samples in
        [since, until)."""
        lo, hi = self.index(since), self.index(until)
        hi = np.maximum(lo, hi)
        return (self.wt[hi] - self.wt[lo]) - since * (self.w[hi] - self.w[lo])


def origin_case(
    origin: Origin,
    listed_at: float,
    samples: Samples,
    period: tuple[float, float],
    fixed_s: float,
    change_cost_s: Array,
) -> OriginCase | None:
    """The bound's view of one origin (None: dead, or never live when measured).
    ``period`` is (start of the run, start of the measured period): an origin
    that existed at the start was archived before it (the warm start) and gets
    its free visit when the measured period starts. ``change_cost_s`` is what
    fetching each of its changes costs."""
    start, measure_from = period
    end = float(samples.times[-1]) if samples.times.size else measure_from
    live_until = min(origin.vanish_s, end + 1)
    if origin.kind == "dead" or live_until <= max(origin.appear_s, measure_from):
        return None
    free_at = measure_from if origin.appear_s < start else max(listed_at, measure_from)
    done = origin.changes_until(free_at) if math.isfinite(free_at) else 0
    changes = origin.changes[done:]
    costs = change_cost_s[done:]
    first_pending = float(changes[0]) if changes.size and not math.isfinite(free_at) else math.inf
    visit_at = samples.times[np.minimum(samples.index(changes), samples.times.size - 1)]
    keep = (changes <= end) & (changes < live_until) & math.isfinite(free_at)
    changes, visit_at, costs = changes[keep], visit_at[keep], costs[keep]
    starts = np.flatnonzero(np.concatenate([[True], visit_at[1:] != visit_at[:-1]]))
    return OriginCase(
        free_at,
        origin.appear_s,
        live_until,
        first_pending,
        changes[starts] if changes.size else changes,
        visit_at[starts] if changes.size else visit_at,
        np.add.reduceat(costs, starts) if changes.size else costs,
        fixed_s,
    )


class _Packed:
    """Every origin's visit instants as rows of one array, longest first, so the
    dynamic programme steps over all origins at once (row k has ``sizes[k]``
    groups; the rest of the row is padding)."""

    def __init__(self, cases: list[OriginCase], samples: Samples) -> None:
        listed = [c for c in cases if math.isfinite(c.free_at)]
        listed.sort(key=lambda c: -c.group_first.size)
        self.sizes = np.array([c.group_first.size for c in listed], dtype=np.int64)
        width = int(self.sizes.max()) if listed else 0
        n = len(listed)
        first = np.zeros((n, width))
        x = np.zeros((n, width))  # W and W t at each visit instant, clipped at the end of life
        xt = np.zeros((n, width))
        cumulative = np.zeros((n, width + 1))
        tail = np.zeros((n, width))
        for k, c in enumerate(listed):
            m = c.group_first.size
            first[k, :m] = c.group_first
            hi = samples.index(np.minimum(c.group_visit, c.live_until))
            x[k, :m], xt[k, :m] = samples.w[hi], samples.wt[hi]
            cumulative[k, 1 : m + 1] = np.cumsum(c.group_cost_s)
            tail[k, :m] = samples.age(c.group_first, c.live_until)
        lo = samples.index(first)
        self.first, self.x, self.xt, self.tail = first, x, xt, tail
        self.w_first, self.wt_first = samples.w[lo], samples.wt[lo]
        self.cumulative = cumulative
        self.fixed = np.array([c.fixed_s for c in listed])
        # the age of never-listed origins and of new ones before their free visit
        self.constant = sum(_age_before_free_visit(c, samples) for c in cases)

    def solve(self, nu: float) -> tuple[float, float]:
        """Σ over origins of the least weighted age + nu * worker seconds, and the
        worker seconds of those least schedules."""
        n, width = self.first.shape
        best = np.zeros((n, width + 1))
        spent = np.zeros((n, width + 1))
        for j in range(1, width + 1):
            rows = int(np.searchsorted(-self.sizes, -j, side="right"))  # sizes >= j
            f = self.first[:rows, :j]
            ages = (self.xt[:rows, j - 1, None] - self.wt_first[:rows, :j]) - f * (
                self.x[:rows, j - 1, None] - self.w_first[:rows, :j]
            )
            ages = np.maximum(ages, 0.0)
            step = self.fixed[:rows, None] + self.cumulative[:rows, j, None]
            step = step - self.cumulative[:rows, :j]
            total = best[:rows, :j] + ages + nu * step
            pick = np.argmin(total, axis=1)
            picked = np.arange(rows)
            best[:rows, j] = total[picked, pick]
            spent[:rows, j] = spent[picked, pick] + step[picked, pick]
        cost, worker_s = self.constant, 0.0
        for k, m in enumerate(self.sizes):
            ends = np.append(best[k, :m] + self.tail[k, :m], best[k, m])
            pick = int(np.argmin(ends))
            cost += float(ends[pick])
            worker_s += float(spent[k, pick])
        return cost, worker_s


def _age_before_free_visit(case: OriginCase, samples: Samples) -> float:
    if not math.isfinite(case.free_at):
        pending = case.first_pending
        return float(samples.age(pending, case.live_until)) if pending < case.live_until else 0.0
    return float(samples.age(case.live_from, min(case.free_at, case.live_until)))


def clairvoyant_bound(
    cases: list[OriginCase], samples: Samples, budget_s: float
) -> dict[str, float | None]:
    """The best dual bound over nu (see the module docstring): the mean age in days
    no schedule within ``budget_s`` worker seconds can beat, and the price nu (days
    of mean age per worker second) at which it holds. nu is bisected on the sign
    of the dual's slope, the least schedules' worker time less the budget; every
    value of the dual is a bound, the largest is kept."""
    if not cases or samples.times.size == 0:
        return {"age_days": None, "nu_days_per_worker_s": None}
    packed = _Packed(cases, samples)
    free, spent = packed.solve(0.0)
    if spent <= budget_s:  # the workers can make every useful visit
        return {"age_days": free, "nu_days_per_worker_s": 0.0}
    lo, hi = _LOG_NU_RANGE
    value, at = 0.0, 0.0
    for _ in range(_SEARCH_STEPS):
        mid = (lo + hi) / 2
        cost, spent = packed.solve(10**mid)
        dual = cost - 10**mid * budget_s
        if dual > value:
            value, at = dual, 10**mid
        lo, hi = (mid, hi) if spent > budget_s else (lo, mid)
    return {"age_days": value, "nu_days_per_worker_s": at}
