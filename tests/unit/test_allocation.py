"""The age-optimal allocation: intervals from rates and a multiplier set by capacity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.domain.allocation import (
    age_gain,
    multiplier_for_capacity,
    optimal_interval_s,
    visits_per_s,
)
from app.simulator.optimum import allocate

DAY_S = 86400.0
NO_FLOOR_S = 1e12


def test_age_gain_is_continuous_where_the_series_takes_over() -> None:
    assert age_gain(0.999e-3) == pytest.approx(age_gain(1.001e-3), rel=1e-2)
    assert age_gain(0.0) == 0.0


def test_intervals_match_the_simulators_independent_age_optimum() -> None:
    rng = np.random.default_rng(3)
    rates_per_day = np.exp(rng.uniform(math.log(1 / 3650), math.log(10), 400))
    capacity_per_day = 150.0
    classes = [(r / DAY_S, 1.0) for r in rates_per_day]
    mu = multiplier_for_capacity(classes, capacity_per_day / DAY_S, NO_FLOOR_S)
    ours = np.array([DAY_S / optimal_interval_s(r / DAY_S, mu, NO_FLOOR_S) for r in rates_per_day])
    oracle = allocate(rates_per_day, capacity_per_day, "even", "age").freqs
    assert ours.sum() == pytest.approx(capacity_per_day, rel=1e-3)
    assert np.allclose(ours, oracle, rtol=0.02)


def test_fast_changers_share_one_interval_and_slow_ones_wait_longer() -> None:
    mu = 1e10
    fast = [optimal_interval_s(r, mu, NO_FLOOR_S) for r in (1e-2, 1e-1)]
    assert fast[0] == pytest.approx(fast[1], rel=0.02)
    assert fast[0] == pytest.approx(math.sqrt(2 * mu), rel=0.02)
    assert optimal_interval_s(1e-7, mu, NO_FLOOR_S) > optimal_interval_s(1e-5, mu, NO_FLOOR_S)


def test_every_origin_gets_at_least_the_floor() -> None:
    floor_s = 64 * DAY_S
    assert optimal_interval_s(0.0, 1e12, floor_s) == floor_s
    assert optimal_interval_s(1e-12, 1e12, floor_s) == floor_s


def test_a_capacity_below_the_floor_puts_every_origin_at_the_floor() -> None:
    floor_s = 64 * DAY_S
    classes = [(1e-5, 1000.0)]
    assert math.isinf(multiplier_for_capacity(classes, 1000 / floor_s / 2, floor_s))


def test_the_multiplier_spends_exactly_the_capacity_above_the_floor() -> None:
    floor_s = 64 * DAY_S
    classes = [(1e-7, 500.0), (1e-5, 300.0), (1e-4, 50.0)]
    capacity = 60 / DAY_S
    mu = multiplier_for_capacity(classes, capacity, floor_s)
    assert visits_per_s(classes, mu, floor_s) == pytest.approx(capacity, rel=1e-6)
