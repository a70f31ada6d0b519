"""The rate-only optimum: the true rates' allocation, valued on the simulated changes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.simulator.bound import Samples
from app.simulator.optimum import OptimumOrigin, rate_only_optimum, realised_age
from app.simulator.world import DAY_S

HOUR_S = 3600.0
PERIOD = (0.0, 2 * DAY_S)
TIMES = np.arange(0.0, 2 * DAY_S, HOUR_S)  # a sample an hour for two days
SAMPLES = Samples(TIMES, np.full(TIMES.size, 1.0))  # one live origin
CHANGES = np.array([-DAY_S, 3.5 * HOUR_S, 20 * HOUR_S, 30 * HOUR_S])  # creation first


def _origin(rate_per_s: float = 0.0, fixed_s: float = 10.0) -> OptimumOrigin:
    return OptimumOrigin(0, 0.0, 2 * DAY_S, -math.inf, rate_per_s, CHANGES, fixed_s, 0.0)


def test_the_age_of_visits_on_the_changes_is_the_runs_mean_age() -> None:
    visits = np.array([-1.0, 12.0, 36.0]) * HOUR_S
    # after -1 h: 3.5 h pending at the samples 4..11 h (ages 0.5..7.5 h, 32 h);
    # after 12 h: 20 h pending at 20..35 h (0..15 h, 120 h); after 36 h: fresh
    assert realised_age(visits, CHANGES, PERIOD, SAMPLES) == pytest.approx(152 / 48 / 24)


def test_at_the_floor_each_origin_is_visited_every_floor_from_its_phase() -> None:
    # the budget pays for the floor only (a visit a day); origin 0's phase is 0:
    # visits at -24, 0, 24 h; 3.5 h pending at 4..23 h (0.5..19.5 h, 200 h) and
    # 30 h at 30..47 h (0..17 h, 153 h)
    floor_cost = 10.0 * 2
    optimum = rate_only_optimum([_origin()], SAMPLES, DAY_S, PERIOD, floor_cost, 1e9)
    assert optimum["age_days"] == pytest.approx(353 / 48 / 24)
    assert optimum["reason"] is None


def test_a_floor_the_workers_cannot_pay_for_gives_no_optimum_and_says_why() -> None:
    # two visits at the floor cost 2 x 100 s; the workers have 150 s
    optimum = rate_only_optimum([_origin(fixed_s=100.0)], SAMPLES, DAY_S, PERIOD, 1e9, 150.0)
    assert optimum["age_days"] is None
    assert "capacity" in optimum["reason"]
    assert optimum["floor_worker_s_per_day"] == pytest.approx(100.0)


def test_a_budget_above_the_capacity_is_cut_to_it() -> None:
    origins = [_origin(rate_per_s=3 / DAY_S)]
    capacity = 100.0

    def optimum(policy_s: float, capacity_s: float) -> dict[str, float]:
        return rate_only_optimum(origins, SAMPLES, DAY_S, PERIOD, policy_s, capacity_s)

    capped = optimum(10 * capacity, capacity)
    assert capped["capped_at_capacity"] is True
    assert capped["worker_s_per_day"] == pytest.approx(capacity / 2)
    assert capped["age_days"] == pytest.approx(optimum(capacity, capacity)["age_days"])
    assert capped["age_days"] > optimum(10 * capacity, 10 * capacity)["age_days"]


def test_a_new_origin_is_first_visited_when_listed_then_every_interval() -> None:
    # appears at 2 h (its creation), listed at 6 h, at the floor (a day): visits at
    # 6 and 30 h; 2 h pending at 2..5 h (0..3 h, 6 h), 20 h at 20..29 h (0..9 h,
    # 45 h), nothing after 30 h (the change at 30 h is saved by the visit at 30 h)
    changes = np.array([2.0, 20.0, 30.0]) * HOUR_S
    origin = OptimumOrigin(7, 2 * HOUR_S, 2 * DAY_S, -math.inf, 0.0, changes, 10.0, 0.0, 6 * HOUR_S)
    # the first visit, then the floor's over the 42 h from it
    cost = 10.0 + 10.0 * 42 / 24
    optimum = rate_only_optimum([origin], SAMPLES, DAY_S, PERIOD, cost, 1e9)
    assert optimum["age_days"] == pytest.approx(51 / 48 / 24)
    never = OptimumOrigin(7, 2 * HOUR_S, 2 * DAY_S, -math.inf, 0.0, changes, 10.0, 0.0, math.inf)
    # never listed, never visited: 2 h pending at every sample from 2 h (0..45 h)
    assert realised_age(np.array([]), changes, (2 * HOUR_S, 2 * DAY_S), SAMPLES) == pytest.approx(
        45 * 46 / 2 / 48 / 24
    )
    assert rate_only_optimum([never], SAMPLES, DAY_S, PERIOD, 0.0, 1e9)["age_days"] == (
        pytest.approx(45 * 46 / 2 / 48 / 24)
    )
