"""The age-optimal allocation: intervals from rates and a multiplier set by capacity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.domain.allocation import (
    age_gain,
    corrected_multiplier,
    multiplier_for_capacity,
    optimal_interval_s,
    past_known_change_cap,
    visits_per_s,
)

DAY_S = 86400.0
NO_FLOOR_S = 1e12


def test_age_gain_is_continuous_where_the_series_takes_over() -> None:
    assert age_gain(0.999e-3) == pytest.approx(age_gain(1.001e-3), rel=1e-2)
    assert age_gain(0.0) == 0.0


def _age(rates: np.ndarray, intervals: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    """Cho & Garcia-Molina's mean age of evenly spaced visits."""
    x = rates * intervals
    return intervals / 2 - 1 / rates + -np.expm1(-x) / (rates * x)


def test_no_other_split_of_the_same_capacity_gives_a_lower_total_age() -> None:
    rng = np.random.default_rng(3)
    rates = np.exp(rng.uniform(math.log(1 / 3650), math.log(10), 400)) / DAY_S
    capacity_per_s = 150.0 / DAY_S
    mu = multiplier_for_capacity([(r, 1.0) for r in rates], capacity_per_s, NO_FLOOR_S)
    freqs = np.array([1 / optimal_interval_s(r, mu, NO_FLOOR_S) for r in rates])
    assert freqs.sum() == pytest.approx(capacity_per_s, rel=1e-3)
    best = _age(rates, 1 / freqs).sum()
    for _ in range(50):
        other = freqs * np.exp(rng.normal(0, 0.3, freqs.size))
        other *= capacity_per_s / other.sum()
        assert _age(rates, 1 / other).sum() >= best * (1 - 1e-9)


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


def test_mu_past_the_cap_of_known_changes_says_the_workers_cannot_follow_every_change() -> None:
    floor_s, bound_s = 57.6 * DAY_S, 6.4 * DAY_S
    cap = bound_s**2 / 2
    clamped = corrected_multiplier(floor_s**2 / 2.5, 30 * DAY_S, 1.0, floor_s, 3600.0)
    for mu in (cap * 1.01, floor_s**2 / 3, clamped, math.inf):
        assert past_known_change_cap(mu, bound_s)
    for mu in (cap, cap * 0.99, None):
        assert not past_known_change_cap(mu, bound_s)
    assert not past_known_change_cap(math.inf, 0.0)  # no bound: no cap
