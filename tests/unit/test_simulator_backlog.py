"""The age the loader's cap adds near an origin's knee, and the optimum that counts it."""

from __future__ import annotations

import numpy as np
import pytest

from app.simulator.backlog import LOADS, MAX_LOAD, backlog
from app.simulator.optimum import VisitCosts, age, allocate, mean_age
from app.simulator.truth import Truth
from app.simulator.world import DAY_S, Origin

K, C = 25.0, 3.0  # the loader_cap world: 25 commits a visit, 3 commits a change


def test_the_backlog_adds_nothing_far_below_the_knee_and_more_than_an_interval_near_it() -> None:
    table = backlog(K, C)
    assert table.excess[0] < 0.01
    assert np.all(np.diff(table.excess) >= 0)
    at = dict(zip(LOADS.tolist(), table.excess.tolist(), strict=True))
    assert at[0.9] > 1.0  # a tenth under the knee, the backlog costs more than an interval


def _archive_age_days(load: float, intervals: int, seed: int) -> float:
    """The simulator's own archive (``Truth.reach``/``visited``) under daily visits
    of an origin at ``load``, its mean age sampled 24 times a visit (mid-hour)."""
    rng = np.random.default_rng(seed)
    rate = load * K / C  # changes a day
    end = intervals * DAY_S
    times = np.sort(rng.uniform(0.0, end, rng.poisson(rate * intervals)))
    changes = np.concatenate([[0.0], times])
    commits = np.cumsum(np.concatenate([[1], 1 + rng.poisson(C - 1, times.size)]))
    origin = Origin(0, "o", "regular", rate, 0, 0.0, np.inf, -np.inf, changes, commits)
    truth = Truth([origin], 0.0, np.inf)
    truth.visited(0, 0.0, 0.0, "full", 0.0, "test")
    total, samples = 0.0, 0
    for day in range(1, intervals + 1):
        for hour in range(24):
            t = (day - 1 + (hour + 0.5) / 24) * DAY_S
            if day > intervals // 10:
                total += max(0.0, t - float(truth.pending_since[0]))
                samples += 1
        start = day * DAY_S
        reach = truth.reach(0, start, K)
        truth.visited(0, start, start, "partial", 0.0, "test", reach)
    return total / samples / DAY_S


def test_the_tabulated_backlog_matches_the_simulators_own_archive_under_a_heavy_load() -> None:
    load = 0.8
    rates, freqs = np.array([load * K / C]), np.array([1.0])
    expected = float(mean_age(rates, freqs, "even", VisitCosts.unit(1).with_backlog(K, C))[0])
    without = float(age(rates, freqs, "even")[0])
    measured = np.median([_archive_age_days(load, 3000, seed) for seed in range(3)])
    assert expected > 1.4 * without  # the backlog matters at this load
    assert measured == pytest.approx(expected, rel=0.15)


def test_the_optimum_counts_the_backlog_and_stays_under_the_heaviest_load() -> None:
    rates = np.array([0.1, 1.0, 5.0])
    plain = VisitCosts(np.full(3, 1.0), np.full(3, 0.5), np.full(3, 1.0 + 0.5 * K / C))
    capped = plain.with_backlog(K, C)
    budget = 1.5 + float(np.sum(0.5 * rates))
    best = allocate(rates, budget, "even", "age", costs=capped)
    naive = allocate(rates, budget, "even", "age", costs=plain)
    assert np.all(best.freqs >= plain.knee(rates) / MAX_LOAD * (1 - 1e-9))
    assert best.worker_s_per_day <= budget * (1 + 1e-6)
    # the deterministic optimum put the fastest origin at its knee; counted with
    # its backlog, that allocation is worse than the one that counts it
    naive_age = float(np.mean(mean_age(rates, naive.freqs, "even", capped)))
    assert best.mean_age_days < naive_age
    assert best.mean_age_days >= naive.mean_age_days
