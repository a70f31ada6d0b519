"""The change-rate estimator: binary observations over irregular intervals."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.change_rate import (
    ChangeObservations,
    estimate_per_s,
    observe,
    optimism,
)

DAY_S = 86400.0
PRIOR_S = 30 * DAY_S


def _learn(rate_per_day: float, visits: int, rng: random.Random) -> float:
    """Estimate a Poisson origin's rate from ``visits`` irregularly spaced visits."""
    obs = ChangeObservations()
    for _ in range(visits):
        interval_days = rng.uniform(0.3, 3.0) / rate_per_day
        changed = rng.random() < -math.expm1(-rate_per_day * interval_days)
        obs = observe(obs, interval_days * DAY_S, changed)
    return estimate_per_s(obs, PRIOR_S) * DAY_S


@pytest.mark.parametrize("rate_per_day", [0.02, 0.2, 1.0, 4.0])
def test_estimates_converge_to_the_true_rate_of_poisson_origins(rate_per_day: float) -> None:
    rng = random.Random(7)
    estimates = [_learn(rate_per_day, 60, rng) for _ in range(300)]
    assert statistics.median(estimates) == pytest.approx(rate_per_day, rel=0.15)


def test_a_new_origin_starts_at_the_prior_rate() -> None:
    assert estimate_per_s(ChangeObservations(), PRIOR_S) == pytest.approx(math.log(2) / PRIOR_S)


def test_unchanged_visits_lower_the_estimate_and_changes_raise_it() -> None:
    quiet = observe(ChangeObservations(), 10 * DAY_S, changed=False)
    busy = observe(ChangeObservations(), 10 * DAY_S, changed=True)
    prior = estimate_per_s(ChangeObservations(), PRIOR_S)
    assert estimate_per_s(quiet, PRIOR_S) < prior < estimate_per_s(busy, PRIOR_S)


def test_old_observations_fade_so_a_waking_origin_is_relearned() -> None:
    obs = ChangeObservations()
    for _ in range(40):
        obs = observe(obs, 20 * DAY_S, changed=False)
    asleep = estimate_per_s(obs, PRIOR_S) * DAY_S
    for _ in range(15):
        obs = observe(obs, 1 * DAY_S, changed=True)
    assert estimate_per_s(obs, PRIOR_S) * DAY_S > 20 * asleep


def test_exploration_is_strongest_for_origins_with_little_history() -> None:
    fresh = ChangeObservations()
    known = ChangeObservations(8.0, 8 * DAY_S, 20.0, 20 * DAY_S)
    assert optimism(fresh) > optimism(known) > 1.0


@given(
    st.lists(
        st.tuples(st.floats(min_value=1.0, max_value=1e8), st.booleans()),
        min_size=0,
        max_size=30,
    )
)
def test_the_estimate_is_always_a_finite_positive_rate(
    observations: list[tuple[float, bool]],
) -> None:
    obs = ChangeObservations()
    for interval_s, changed in observations:
        obs = observe(obs, interval_s, changed)
    rate = estimate_per_s(obs, PRIOR_S)
    assert math.isfinite(rate) and rate > 0
