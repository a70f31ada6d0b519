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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

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


def _frequencies_at(rates: Array, mu: float, timing: Timing, objective: Objective) -> Array:
    """Each origin's frequency whose marginal gain is ``mu`` (0 if even its first
    visit gains less). Marginal gains fall as the frequency grows."""
    freqs = np.zeros_like(rates)
    changing = rates > 0
    lam = rates[changing]
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
class Allocation:
    """The optimal frequencies for one timing and objective, and what they give."""

    timing: Timing
    objective: Objective
    freqs: Array
    mean_freshness: float
    mean_age_days: float
    """inf when some changing origin gets no visit."""

    def starved(self, bound_days: float) -> int:
        """Origins visited less often than once per ``bound_days`` (or never)."""
        return int(np.sum(self.freqs * bound_days < 1))


def allocate(
    rates: Array, capacity_per_day: float, timing: Timing, objective: Objective
) -> Allocation:
    """The allocation of ``capacity_per_day`` visits maximising mean freshness or
    minimising mean age; μ by geometric bisection until Σ f = C."""
    rates = np.asarray(rates, dtype=np.float64)
    if rates.size == 0 or capacity_per_day <= 0 or not np.any(rates > 0):
        freqs = np.zeros_like(rates)
    else:
        lo, hi = 1e-15, 1e15
        for _ in range(100):
            mu = math.sqrt(lo * hi)
            if _frequencies_at(rates, mu, timing, objective).sum() > capacity_per_day:
                lo = mu
            else:
                hi = mu
        freqs = _frequencies_at(rates, hi, timing, objective)
        # Whatever bisection tolerance left over goes to the visited origins pro rata.
        if freqs.sum() > 0:
            freqs *= capacity_per_day / freqs.sum()
    return _evaluate(rates, freqs, timing, objective)


def _evaluate(rates: Array, freqs: Array, timing: Timing, objective: Objective) -> Allocation:
    return Allocation(
        timing,
        objective,
        freqs,
        float(np.mean(freshness(rates, freqs, timing))) if rates.size else 1.0,
        float(np.mean(age(rates, freqs, timing))) if rates.size else 0.0,
    )


def uniform(rates: Array, capacity_per_day: float, timing: Timing) -> Allocation:
    """Every origin visited equally often: the no-knowledge baseline."""
    rates = np.asarray(rates, dtype=np.float64)
    freqs = np.full_like(rates, capacity_per_day / max(1, rates.size))
    return _evaluate(rates, freqs, timing, "freshness")
