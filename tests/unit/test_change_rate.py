"""The change-rate estimator: binary observations over irregular intervals."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.change_rate import (
    ChangeObservations,
    _excess,
    _terms,
    estimate_per_s,
    observe,
    optimism,
)

DAY_S = 86400.0
PRIOR_S = 30 * DAY_S


def _learn(
    rate_per_day: float,
    visits: int,
    rng: random.Random,
    apart: tuple[float, float] = (0.3, 3.0),
) -> float:
    """Estimate a Poisson origin's rate from ``visits`` irregularly spaced visits,
    ``apart`` (a range of) change intervals apart."""
    obs = ChangeObservations()
    for _ in range(visits):
        interval_days = rng.uniform(*apart) / rate_per_day
        changed = rng.random() < -math.expm1(-rate_per_day * interval_days)
        obs = observe(obs, interval_days * DAY_S, changed)
    return estimate_per_s(obs, PRIOR_S) * DAY_S


@pytest.mark.parametrize("rate_per_day", [0.02, 0.2, 1.0, 4.0])
@pytest.mark.parametrize("apart", [(0.1, 0.3), (0.3, 3.0), (3.0, 6.0)])
def test_estimates_converge_to_the_true_rate_of_poisson_origins(
    rate_per_day: float, apart: tuple[float, float]
) -> None:
    """Within 10 % (the median of 300 origins) whether visits are a tenth of a
    change interval apart or six: fast changers visited every few changes are
    not under-estimated by the prior."""
    rng = random.Random(7)
    estimates = [_learn(rate_per_day, 60, rng, apart) for _ in range(300)]
    assert statistics.median(estimates) == pytest.approx(rate_per_day, rel=0.1)


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


def _newton_over_terms(obs: ChangeObservations, prior_interval_s: float) -> float:
    """The solver as it was before its terms were unrolled: the equation as a list
    of terms (``_terms``), each Newton step summing over it (``_excess``)."""
    terms, unchanged_s = _terms(obs, prior_interval_s)
    lo, hi = math.log(1e-14), math.log(1e2)
    count = sum(c for c, _ in terms)
    length = sum(c * length for c, length in terms) / count
    u = math.log(max(1e-14, min(1e2, math.log1p(count * length / unchanged_s) / length)))
    for _ in range(100):
        value, slope = _excess(u, terms, unchanged_s)
        if value > 0:
            lo = u
        else:
            hi = u
        step = value / slope if slope < 0 else math.inf
        if abs(step) < 1e-10:
            return math.exp(u - step)
        u = u - step
        if not lo < u < hi:
            u = (lo + hi) / 2
    return math.exp(u)


@given(
    st.lists(
        st.tuples(st.floats(min_value=1e-3, max_value=1e11), st.booleans()),
        min_size=0,
        max_size=40,
    ),
    st.floats(min_value=1.0, max_value=1e10),
)
def test_the_unrolled_solver_gives_the_same_estimate_to_the_last_bit(
    observations: list[tuple[float, bool]], prior_s: float
) -> None:
    obs = ChangeObservations()
    for interval_s, changed in observations:
        obs = observe(obs, interval_s, changed)
    assert estimate_per_s(obs, prior_s) == _newton_over_terms(obs, prior_s)
    assert estimate_per_s(obs, prior_s) == _newton_over_terms(obs, prior_s)  # kept, if kept


@given(
    st.tuples(*[st.just(0.0) | st.floats(min_value=0.0, max_value=1e9)] * 4),
    st.floats(min_value=1.0, max_value=1e10),
)
def test_any_observations_give_the_former_estimate_to_the_last_bit(
    values: tuple[float, float, float, float], prior_s: float
) -> None:
    """Even those no visits make (e.g. an interval without a length), which fail alike."""
    obs = ChangeObservations(*values)

    def result(solve: Callable[[ChangeObservations, float], float]) -> float | str:
        try:
            return solve(obs, prior_s)
        except ArithmeticError as exc:
            return type(exc).__name__

    assert result(estimate_per_s) == result(_newton_over_terms)
