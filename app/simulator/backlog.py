"""The age a loader's time limit adds to an origin visited evenly (pure math).

A visit fetches at most K new commits before the loader's cap cuts it
(``Loader.fetchable_commits``) and saves the whole changes that fit, at
least one (``Truth.reach``); the rest waits for the next visit. An origin
changing at λ (Poisson) with c commits per change on average, visited
every I, brings λ I c commits per interval against K fetched: its load is

    r = λ c / (K f),  f = 1 / I.

At r = 1 (the knee, ``VisitCosts.knee``) a visit fetches on average what
arrived, but the arrivals vary from one interval to the next: what one
interval could not fetch waits, and the backlog is a random walk without
drift, whose mean grows without bound. Below the knee it settles, but the
origin still lags behind the oldest change of its backlog, so its mean
age exceeds the formula of even visits (``optimum.age``), which assumes
every visit saves everything. The excess, in units of the interval I, is a
function of r alone for a given loader (K, c): ``Backlog`` tabulates it by
simulating the queue (Lindley's recursion of the backlog, with the change
times kept so that the age is exact), once per loader, seeded.

Loads above ``MAX_LOAD`` are taken as out of reach (the excess there is
tens of intervals and still growing with the length of the simulation);
below ``LOADS[0]`` the excess is nil (a visit almost never meets the cap).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

Array = np.ndarray[tuple[int], np.dtype[np.float64]]

#: The loads tabulated (r): the excess is interpolated between them.
LOADS: Array = np.round(np.arange(0.3, 0.9501, 0.025), 3)
MAX_LOAD = float(LOADS[-1])
#: Visit intervals simulated per load, after a burn-in of a tenth of them.
INTERVALS = 20_000
SEED = 20031


@dataclass(frozen=True)
class Backlog:
    """The mean age a loader's cap adds, per load (``excess``, in intervals)."""

    commits_per_visit: float
    """K: the most new commits one visit fetches."""
    commits_per_change: float
    """c: commits per change, on average (1 + Poisson(c - 1) each)."""
    excess: Array
    """The extra mean age at each of ``LOADS``, in units of the interval;
    non-decreasing in the load."""

    def load(self, rates: Array, freqs: Array) -> Array:
        """The load r of each origin visited at ``freqs`` (inf for an unvisited changing one)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            out: Array = np.where(
                rates > 0, rates * self.commits_per_change / (self.commits_per_visit * freqs), 0.0
            )
        return out

    def excess_age(self, rates: Array, freqs: Array) -> Array:
        """The extra mean age of each origin (in the unit of 1/freqs): 0 below the
        first tabulated load, inf above ``MAX_LOAD``."""
        rho = self.load(rates, freqs)
        per_interval = np.interp(rho, LOADS, self.excess, left=0.0, right=math.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            out: Array = np.where(rho > 0, per_interval / freqs, 0.0)
        return out


def excess_at(load: float, commits_per_visit: float, commits_per_change: float) -> float:
    """The simulated excess mean age (in intervals) at ``load`` (see the module)."""
    rng = np.random.default_rng(SEED)
    per_interval = load * commits_per_visit / commits_per_change  # changes
    count = int(rng.poisson(per_interval * INTERVALS))
    times = np.sort(rng.uniform(0.0, INTERVALS, count))
    commits = np.cumsum(1 + rng.poisson(commits_per_change - 1, count))
    burn = INTERVALS // 10
    done, total = 0, 0.0
    for k in range(1, INTERVALS + 1):
        # over [k - 1, k) the archive lacks every change from times[done] on
        if done < count and k > burn:
            first = float(times[done])
            if first <= k - 1:
                total += k - 0.5 - first
            elif first < k:
                total += (k - first) ** 2 / 2
        # the visit at k: the whole changes that fit, at least one
        arrived = int(np.searchsorted(times, k))
        if arrived > done:
            before = int(commits[done - 1]) if done else 0
            fits = int(np.searchsorted(commits[done:arrived], before + commits_per_visit, "right"))
            done += max(1, fits)
    mean = total / (INTERVALS - burn)
    x = per_interval  # the formula of even visits, in intervals: A f
    even = 0.5 - 1 / x + -math.expm1(-x) / (x * x)
    return max(0.0, mean - even)


@functools.lru_cache(maxsize=16)
def backlog(commits_per_visit: float, commits_per_change: float) -> Backlog:
    """The table of one loader (cached: it takes a second or two)."""
    if not (commits_per_visit >= 1 and commits_per_change >= 1):
        raise ValueError(
            f"commits_per_visit {commits_per_visit:g} and commits_per_change "
            f"{commits_per_change:g} must be at least 1"
        )
    values = [excess_at(float(rho), commits_per_visit, commits_per_change) for rho in LOADS]
    # the simulation's noise aside, a heavier load never lags less
    excess: Array = np.maximum.accumulate(np.array(values, dtype=np.float64))
    return Backlog(commits_per_visit, commits_per_change, excess)
