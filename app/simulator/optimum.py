"""The best allocation of a visit capacity, from the true change rates (pure math).

N origins change as Poisson processes with rates λ_i (per day); the loaders can
make C visits a day in all. Visiting origin i at frequency f_i (Σ f_i = C)
gives it an expected freshness F (probability that the archive holds every
change) and an expected age A (time since the first change the archive does
not hold, 0 when fresh). Two timings of the visits:

Evenly spaced visits, every I = 1/f (Cho & Garcia-Molina, "Effective page
refresh policies for web crawlers", ACM TODS 28(4), 2003, and "Synchronizing a
database to improve freshness", SIGMOD 2000), with r = λ/f:

    F(λ, f) = (1 - e^{-r}) / r
    A(λ, f) = (1/λ) (r/2 - 1 + (1 - e^{-r}) / r)

Visits at Poisson times of rate q (Azar, Horvitz, Lubetzky, Peres, Shah,
"Tractable near-optimal policies for crawling", PNAS 115(32), 2018): the last
event before a random instant is a visit with probability q/(q+λ), and the age
is E[(V - X)^+] with V ~ Exp(q) the time since the last visit and X ~ Exp(λ):

    F(λ, q) = q / (q + λ)
    A(λ, q) = 1/q - 1/(λ + q) = λ / (q (λ + q))

Each objective is separable and concave (freshness) or convex (age) in each
frequency, so the optimum is the Lagrangian solution: every visited origin
has the same marginal gain μ, dF/df_i = μ (or -dA/df_i = μ), and μ is set so
that Σ f_i = C (Cho & Garcia-Molina, TODS 2003, section 5). The marginal
gains used here:

    even, freshness:    dF/df   = (1 - (1 + r) e^{-r}) / λ          (→ 1/λ as f → 0)
    even, age:         -dA/df   = (r²/2 - 1 + (1 + r) e^{-r}) / λ²   (→ ∞ as f → 0)
    Poisson, freshness: dF/dq   = λ / (q + λ)²                      (→ 1/λ as q → 0)
    Poisson, age:      -dA/dq   = 1/q² - 1/(λ + q)²                 (→ ∞ as q → 0)

The freshness gain of a first visit is bounded by 1/λ: when μ exceeds it the
origin gets no visit at all. The freshness optimum therefore abandons the
fastest-changing origins, which an archive cannot accept; ``starved`` counts
the origins an allocation leaves without a visit for longer than a bound.
The age optimum visits every changing origin.

Production's constraints, as the simulator compares them (``allocate`` with
``costs`` and ``floor_per_day``):

- **a floor**: every live origin, changing or not, gets at least
  ``floor_per_day`` visits (one per visit type's ``max_interval``);
- **worker time, not visits**: the capacity is worker seconds per day, and a
  visit of origin i costs what the simulator's loader charges, ``min(cap_i,
  fixed_i + per_change_i * changes fetched)``, with λ/f changes fetched on
  average. Origin i's worker time per day is then
  ``g_i(f) = min(cap_i f, fixed_i f + per_change_i λ_i)``: linear in f with
  slope cap_i below the knee f = per_change_i λ_i / (cap_i - fixed_i) and
  slope fixed_i above it (changes are fetched however often one visits; what
  frequent visits cost is the fixed part).

- **the cap's backlog**: a visit fetches at most the commits the cap allows,
  and the changes that arrive in one interval vary, so near its knee an
  origin carries a backlog and lags more than the even-visit formula says
  (at the knee itself the backlog grows without bound). With
  ``VisitCosts.backlog`` the age of even visits includes that excess
  (``app.simulator.backlog``, tabulated by simulating the queue), and every
  origin is visited at least at the frequency of the heaviest load
  tabulated (``MAX_LOAD`` of its knee's).

The Lagrangian then prices worker time at nu: each origin takes the f ≥ floor
maximising gain_i(f) - nu g_i(f) (the best of the two linear pieces, each
solved as above with μ = nu * slope), and nu is bisected until Σ g_i = the
budget. With a concave g this is the optimum of the convexified problem
(Lagrangian relaxation), not always of the exact one; the allocation's own
worker time is reported beside the budget.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from app.simulator.backlog import LOADS, MAX_LOAD, Backlog, backlog

Array = np.ndarray[tuple[int], np.dtype[np.float64]]
Timing = Literal["even", "poisson"]
Objective = Literal["freshness", "age"]

_BISECTIONS = 80


def freshness(rates: Array, freqs: Array, timing: Timing) -> Array:
    """Expected freshness of each origin (1 for an origin that never changes)."""
    out = np.ones_like(rates)
    changing = rates > 0
    lam, f = rates[changing], freqs[changing]
    with np.errstate(divide="ignore", invalid="ignore"):
        if timing == "even":
            r = lam / f
            value = np.where(f > 0, -np.expm1(-r) / r, 0.0)
        else:
            value = f / (f + lam)
    out[changing] = value
    return out


def age(rates: Array, freqs: Array, timing: Timing) -> Array:
    """Expected age of each origin in days (inf for a changing origin never visited)."""
    out = np.zeros_like(rates)
    changing = rates > 0
    lam, f = rates[changing], freqs[changing]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if timing == "even":
            r = lam / f
            value = (r / 2 - 1 - np.expm1(-r) / r) / lam
        else:
            value = 1 / f - 1 / (lam + f)
    out[changing] = np.where(f > 0, value, np.inf)
    return out


def mean_age(rates: Array, freqs: Array, timing: Timing, costs: VisitCosts | None = None) -> Array:
    """``age``, plus for evenly spaced visits what the loader cap's backlog adds
    (``VisitCosts.backlog``). Visits at Poisson times are taken as saving
    everything: their backlog is not modelled."""
    out = age(rates, freqs, timing)
    if costs is not None and costs.backlog is not None and timing == "even":
        out = out + costs.backlog.excess_age(rates, freqs)
    return out


def marginal_gain(rates: Array, freqs: Array, timing: Timing, objective: Objective) -> Array:
    """d(objective gain)/d(frequency) of each origin: what the Lagrangian equalises."""
    lam, f = rates, freqs
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if timing == "even":
            r = lam / f
            small = r < 1e-3  # Taylor series where the closed forms cancel out
            if objective == "freshness":
                g = np.where(small, r * r / 2 - r**3 / 3, 1 - (1 + r) * np.exp(-r))
                return g / lam
            h = np.where(small, r**3 / 3 - r**4 / 8, r * r / 2 - 1 + (1 + r) * np.exp(-r))
            return h / (lam * lam)
        if objective == "freshness":
            return lam / (f + lam) ** 2
        return 1 / (f * f) - 1 / (lam + f) ** 2


def _frequencies_at(rates: Array, mu: float | Array, timing: Timing, objective: Objective) -> Array:
    """Each origin's frequency whose marginal gain is ``mu`` (a number, or one per
    origin; 0 if even its first visit gains less). Marginal gains fall as the
    frequency grows."""
    freqs = np.zeros_like(rates)
    changing = rates > 0
    lam = rates[changing]
    mu = np.broadcast_to(np.asarray(mu, dtype=np.float64), rates.shape)[changing]
    if objective == "freshness":
        if timing == "poisson":
            freqs[changing] = np.maximum(0.0, np.sqrt(lam / mu) - lam)
            return freqs
        visited = 1 / lam > mu
    else:
        visited = np.ones_like(lam, dtype=bool)
    lo = np.full(lam.shape, 1e-12)
    hi = np.maximum(lam, 1.0) * 1e6
    for _ in range(_BISECTIONS):  # geometric bisection: frequencies span decades
        mid = np.sqrt(lo * hi)
        above = marginal_gain(lam, mid, timing, objective) > mu
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    freqs[changing] = np.where(visited, np.sqrt(lo * hi), 0.0)
    return freqs


@dataclass(frozen=True)
class VisitCosts:
    """Worker seconds of one visit of each origin: ``min(cap_s, fixed_s +
    per_change_s * changes fetched)``. A visit cut at ``cap_s`` saves only the
    changes it fetched in that time (a partial visit, as the reference
    simulator's loader has it), so an origin visited less often than its knee
    falls further behind at every visit: the optimum visits every origin at
    least at its knee."""

    fixed_s: Array
    per_change_s: Array
    cap_s: Array
    backlog: Backlog | None = None
    """What the cap's backlog adds to the age of evenly spaced visits
    (``app.simulator.backlog``); None: every visit saves everything."""

    @classmethod
    def unit(cls, count: int) -> VisitCosts:
        """Every visit costs 1: a capacity counted in visits."""
        ones = np.ones(count)
        return cls(ones, np.zeros(count), ones)

    def worker_s_per_day(self, rates: Array, freqs: Array) -> Array:
        """Each origin's worker seconds per day when visited at ``freqs``."""
        out: Array = np.minimum(
            self.cap_s * freqs, self.fixed_s * freqs + self.per_change_s * rates
        )
        return out

    def knee(self, rates: Array) -> Array:
        """The frequency above which a visit no longer hits the cap: the least
        that keeps up with the origin's changes (0 where changes cost nothing)."""
        gap = self.cap_s - self.fixed_s
        work = self.per_change_s * rates
        with np.errstate(divide="ignore", invalid="ignore"):
            out: Array = np.where(work <= 0, 0.0, np.where(gap > 0, work / gap, _NEVER))
        return np.minimum(out, _NEVER)

    def with_backlog(self, commits_per_visit: float, commits_per_change: float) -> VisitCosts:
        """These costs, with the backlog of a loader that fetches at most
        ``commits_per_visit`` commits a visit (``app.simulator.backlog``)."""
        return dataclasses.replace(self, backlog=backlog(commits_per_visit, commits_per_change))

    def least_frequency(self, rates: Array) -> Array:
        """The least frequency an allocation may give each origin: its knee, or
        with a ``backlog`` the frequency of the heaviest load tabulated (at the
        knee itself the backlog grows without bound)."""
        knee = self.knee(rates)
        if self.backlog is None:
            return knee
        out: Array = np.minimum(knee / MAX_LOAD, _NEVER)
        return out


_NEVER = 1e9
"""A frequency (per day) no allocation reaches."""


@dataclass(frozen=True)
class Allocation:
    """The optimal frequencies for one timing and objective, and what they give."""

    timing: Timing
    objective: Objective
    freqs: Array
    mean_freshness: float
    mean_age_days: float
    """inf when some changing origin gets no visit."""
    worker_s_per_day: float = 0.0
    feasible: bool = True
    """False when the floor alone costs more than the capacity (then: the floor,
    scaled down to the capacity)."""

    def starved(self, bound_days: float) -> int:
        """Origins visited less often than once per ``bound_days`` (or never)."""
        return int(np.sum(self.freqs * bound_days < 1 - 1e-9))

    @property
    def visits_per_day(self) -> float:
        """Visits a day in all."""
        return float(self.freqs.sum())


def allocate(
    rates: Array,
    capacity_per_day: float,
    timing: Timing,
    objective: Objective,
    *,
    costs: VisitCosts | None = None,
    floor_per_day: float = 0.0,
) -> Allocation:
    """The allocation of ``capacity_per_day`` (visits, or worker seconds with
    ``costs``) maximising mean freshness or minimising mean age, every origin
    visited at least ``floor_per_day`` and at least at its knee (``VisitCosts``);
    nu by geometric bisection until the worker time is the capacity."""
    rates = np.asarray(rates, dtype=np.float64)
    costs = costs or VisitCosts.unit(rates.size)
    # below its knee an origin falls behind for good (``VisitCosts``)
    floor = np.maximum(np.full_like(rates, floor_per_day), costs.least_frequency(rates))
    if rates.size == 0 or capacity_per_day <= 0:
        return _evaluate(rates, np.zeros_like(rates), timing, objective, costs)
    floor_cost = float(costs.worker_s_per_day(rates, floor).sum())
    if floor_cost >= capacity_per_day:
        scaled = floor * capacity_per_day / floor_cost if floor_cost else floor
        return _evaluate(rates, scaled, timing, objective, costs, feasible=floor_cost == 0)
    lo, hi = 1e-30, 1e15
    for _ in range(120):
        nu = math.sqrt(lo * hi)
        freqs = _best_frequencies(rates, nu, timing, objective, costs, floor)
        if costs.worker_s_per_day(rates, freqs).sum() > capacity_per_day:
            lo = nu
        else:
            hi = nu
    freqs = _best_frequencies(rates, hi, timing, objective, costs, floor)
    return _evaluate(rates, freqs, timing, objective, costs)


def _best_frequencies(
    rates: Array, nu: float, timing: Timing, objective: Objective, costs: VisitCosts, floor: Array
) -> Array:
    """Each origin's f >= floor maximising gain(f) - nu g(f): at or above the
    knee (in ``floor``) a visit's worker time grows by ``fixed_s`` per visit.
    With a backlog (even visits, age), an origin whose best f without it
    meets the cap's backlog takes the best of that f and the frequencies of
    the tabulated loads above it (the age with its backlog, plus nu times the
    worker time, is no longer convex in f: a grid, not a root)."""
    out: Array = np.maximum(_frequencies_at(rates, nu * costs.fixed_s, timing, objective), floor)
    backlog = costs.backlog
    if backlog is None or timing != "even" or objective != "age":
        return out
    knee = costs.knee(rates)
    rho = backlog.load(rates, out)
    meets = np.flatnonzero((knee > 0) & (rho > LOADS[0]))
    if meets.size == 0:
        return out
    lam, fixed = rates[meets], costs.fixed_s[meets]
    # candidates: the f found, and every tabulated load's f that is not below it
    grid = knee[meets, None] / LOADS[None, :]
    grid = np.where(grid >= out[meets, None], grid, out[meets, None])
    cand = np.concatenate([out[meets, None], grid], axis=1)
    lam2 = np.broadcast_to(lam[:, None], cand.shape).ravel()
    total = mean_age(lam2, cand.ravel(), timing, costs).reshape(cand.shape)
    total = total + nu * fixed[:, None] * cand
    out[meets] = cand[np.arange(meets.size), np.argmin(total, axis=1)]
    return out


def _evaluate(
    rates: Array,
    freqs: Array,
    timing: Timing,
    objective: Objective,
    costs: VisitCosts,
    *,
    feasible: bool = True,
) -> Allocation:
    return Allocation(
        timing,
        objective,
        freqs,
        float(np.mean(freshness(rates, freqs, timing))) if rates.size else 1.0,
        float(np.mean(mean_age(rates, freqs, timing, costs))) if rates.size else 0.0,
        float(costs.worker_s_per_day(rates, freqs).sum()),
        feasible,
    )


def uniform(
    rates: Array, capacity_per_day: float, timing: Timing, *, costs: VisitCosts | None = None
) -> Allocation:
    """Every origin visited equally often, as often as the capacity allows: the
    no-knowledge baseline."""
    rates = np.asarray(rates, dtype=np.float64)
    costs = costs or VisitCosts.unit(rates.size)
    lo, hi = 0.0, _NEVER
    for _ in range(200):
        mid = (lo + hi) / 2
        spent = costs.worker_s_per_day(rates, np.full_like(rates, mid)).sum()
        lo, hi = (mid, hi) if spent <= capacity_per_day else (lo, mid)
    return _evaluate(rates, np.full_like(rates, lo), timing, "freshness", costs)
