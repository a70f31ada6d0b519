"""The rate-based optimum of the simulator: formulas, Lagrangian solution, brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.simulator.optimum import (
    Objective,
    Timing,
    VisitCosts,
    age,
    allocate,
    freshness,
    uniform,
)

RATES = np.array([0.1, 1.0, 5.0])


def _objective(rates: np.ndarray, freqs: np.ndarray, timing: Timing, objective: Objective) -> float:
    if objective == "freshness":
        return float(np.mean(freshness(rates, freqs, timing)))
    return -float(np.mean(age(rates, freqs, timing)))


def _brute_force(capacity: float, timing: Timing, objective: Objective, steps: int = 400) -> float:
    """The best mean objective over a grid of allocations of ``capacity``."""
    f1, f2 = (a.ravel() for a in np.meshgrid(*[np.linspace(0, capacity, steps + 1)] * 2))
    keep = f1 + f2 <= capacity + 1e-12
    columns = [f1[keep], f2[keep], np.maximum(0.0, capacity - f1[keep] - f2[keep])]
    measure = freshness if objective == "freshness" else age
    sign = 1 if objective == "freshness" else -1
    values = sum(
        measure(np.full(c.size, lam), c, timing) for lam, c in zip(RATES, columns, strict=True)
    )
    return float(np.max(sign * values / len(RATES)))


@pytest.mark.parametrize("timing", ["even", "poisson"])
@pytest.mark.parametrize("objective", ["freshness", "age"])
@pytest.mark.parametrize("capacity", [0.5, 3.0])
def test_lagrangian_optimum_matches_a_brute_force_search(
    timing: Timing, objective: Objective, capacity: float
) -> None:
    best = _brute_force(capacity, timing, objective)
    found = allocate(RATES, capacity, timing, objective)
    value = _objective(RATES, found.freqs, timing, objective)
    assert found.freqs.sum() == pytest.approx(capacity)
    assert value >= best - 1e-9
    assert value - best < 2e-3 * max(1.0, abs(best))


def test_freshness_optimum_starves_the_fastest_origin_when_capacity_is_scarce() -> None:
    found = allocate(RATES, 0.5, "even", "freshness")
    assert found.freqs[2] == 0
    assert math.isinf(found.mean_age_days)
    assert found.starved(bound_days=30) >= 1


def test_age_optimum_visits_every_changing_origin() -> None:
    found = allocate(RATES, 0.5, "even", "age")
    assert np.all(found.freqs > 0)
    assert math.isfinite(found.mean_age_days)


def test_evenly_spaced_visits_at_the_change_rate_are_fresh_one_minus_one_over_e() -> None:
    value = freshness(np.array([2.0]), np.array([2.0]), "even")[0]
    assert value == pytest.approx(1 - math.exp(-1))


def test_poisson_visit_freshness_and_age_have_the_closed_forms_of_azar_et_al() -> None:
    lam, rho = np.array([1.0]), np.array([3.0])
    assert freshness(lam, rho, "poisson")[0] == pytest.approx(3 / 4)
    assert age(lam, rho, "poisson")[0] == pytest.approx(1 / 3 - 1 / 4)


def test_even_age_matches_a_monte_carlo_estimate() -> None:
    rng = np.random.default_rng(1)
    lam, interval = 0.7, 2.0
    t = rng.uniform(0, interval, 200_000)  # time since the last visit
    first_change = rng.exponential(1 / lam, t.size)
    estimate = float(np.mean(np.maximum(0.0, t - first_change)))
    exact = age(np.array([lam]), np.array([1 / interval]), "even")[0]
    assert exact == pytest.approx(estimate, rel=0.02)


def test_origins_that_never_change_need_no_visit_and_are_always_fresh() -> None:
    found = allocate(np.array([0.0, 1.0]), 1.0, "poisson", "age")
    assert found.freqs[0] == 0
    assert freshness(np.array([0.0]), np.array([0.0]), "even")[0] == 1


def test_the_optimum_beats_visiting_every_origin_equally() -> None:
    rates = np.geomspace(1 / 3650, 10, 200)
    for timing in ("even", "poisson"):
        base = uniform(rates, 50.0, timing)
        assert allocate(rates, 50.0, timing, "freshness").mean_freshness > base.mean_freshness
        assert allocate(rates, 50.0, timing, "age").mean_age_days < base.mean_age_days


def test_under_a_floor_every_origin_is_visited_at_least_that_often() -> None:
    rates = np.array([0.0, 1 / 3650, 0.01, 1.0, 8.0])
    for objective in ("freshness", "age"):
        found = allocate(rates, 3.0, "even", objective, floor_per_day=1 / 64)
        assert np.all(found.freqs >= 1 / 64 - 1e-12)
        assert found.starved(64) == 0
        assert found.visits_per_day == pytest.approx(3.0, rel=1e-6)


def test_a_floor_beyond_the_capacity_is_flagged_and_scaled_down() -> None:
    found = allocate(np.ones(100), 1.0, "even", "age", floor_per_day=1 / 10)
    assert not found.feasible
    assert found.visits_per_day == pytest.approx(1.0)


def test_worker_time_optimum_matches_a_brute_force_search() -> None:
    costs = VisitCosts(np.array([1.0, 2.0, 5.0]), np.full(3, 0.5), np.full(3, 1e6))
    budget = 12.0
    fixed_cost = float(np.sum(0.5 * RATES))
    grid = np.linspace(0, budget, 601)
    f1, f2 = (a.ravel() for a in np.meshgrid(grid, grid / 2))
    f3 = (budget - fixed_cost - f1 - 2 * f2) / 5
    keep = f3 >= 0
    columns = (f1[keep], f2[keep], f3[keep])
    total = sum(age(np.full(c.size, lam), c, "even") for lam, c in zip(RATES, columns, strict=True))
    best = float(np.min(total)) / 3
    found = allocate(RATES, budget, "even", "age", costs=costs)
    assert found.worker_s_per_day == pytest.approx(budget, rel=1e-6)
    assert found.mean_age_days <= best + 1e-9
    assert best - found.mean_age_days < 2e-3 * best


def test_doubling_the_cost_of_every_visit_is_halving_the_capacity() -> None:
    rates = np.geomspace(1 / 365, 5, 50)
    one = VisitCosts(np.full(50, 100.0), np.full(50, 10.0), np.full(50, 3000.0))
    two = VisitCosts(one.fixed_s * 2, one.per_change_s * 2, one.cap_s * 2)
    cheap = allocate(rates, 40_000.0, "poisson", "age", costs=one, floor_per_day=1 / 64)
    dear = allocate(rates, 80_000.0, "poisson", "age", costs=two, floor_per_day=1 / 64)
    assert dear.mean_age_days == pytest.approx(cheap.mean_age_days, rel=1e-6)
    assert cheap.worker_s_per_day <= 40_000.0 * (1 + 1e-6)


def test_uniform_spends_the_same_worker_time_on_every_origin_alike() -> None:
    rates = np.array([0.1, 1.0, 5.0])
    costs = VisitCosts(np.full(3, 1.0), np.zeros(3), np.full(3, 1.0))
    base = uniform(rates, 6.0, "even", costs=costs)
    assert base.freqs == pytest.approx(np.full(3, 2.0))


def test_the_optimum_visits_every_origin_often_enough_to_stay_under_the_cap() -> None:
    # the fastest origin's changes fill a capped visit after 1 / (0.5 * 5 / 9) days
    costs = VisitCosts(np.full(3, 1.0), np.full(3, 0.5), np.full(3, 10.0))
    knee = costs.knee(RATES)
    assert knee == pytest.approx(0.5 * RATES / 9.0)
    found = allocate(RATES, 2.0 + float(np.sum(0.5 * RATES)), "even", "age", costs=costs)
    assert np.all(found.freqs >= knee * (1 - 1e-9))
    # at or above the knee a visit costs its fixed part plus the changes it fetches
    spent = float(np.sum(found.freqs + 0.5 * RATES))
    assert found.worker_s_per_day == pytest.approx(spent)


def test_a_capacity_below_what_keeps_up_with_every_origin_is_flagged() -> None:
    costs = VisitCosts(np.full(3, 1.0), np.full(3, 0.5), np.full(3, 1.5))
    assert not allocate(RATES, 3.0, "even", "age", costs=costs).feasible


def test_origins_whose_changes_cost_nothing_have_no_knee() -> None:
    assert np.array_equal(VisitCosts.unit(3).knee(RATES), np.zeros(3))
