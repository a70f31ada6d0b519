"""The clairvoyant bound: below every schedule the workers could make."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from app.simulator.bound import OriginCase, Samples, clairvoyant_bound, origin_case
from app.simulator.world import DAY_S, Origin

HOUR_S = 3600.0
TIMES = np.arange(0.0, 2 * DAY_S, HOUR_S)  # a sample an hour for two days
SAMPLES = Samples(TIMES, np.full(TIMES.size, 2.0))


def _origin(index: int, changes: list[float]) -> Origin:
    return Origin(
        index,
        f"u{index}",
        "regular",
        1.0,
        0,
        -DAY_S,
        math.inf,
        -math.inf,
        np.array([-DAY_S, *changes]),
        np.arange(1, len(changes) + 2, dtype=np.int64),
    )


def _case(origin: Origin, fixed_s: float = 10.0, per_change_s: float = 5.0) -> OriginCase:
    costs = np.full(origin.changes.size, per_change_s)
    case = origin_case(origin, -DAY_S, SAMPLES, (-0.5 * DAY_S, 0.0), fixed_s, costs)
    assert case is not None
    return case


def _mean_age(origins: list[Origin], visits: list[list[float]]) -> float:
    """The run's mean age (days) of these visits, sample by sample: fresh at the
    start, a visit saves every change made by its time."""
    total = 0.0
    for t in TIMES:
        for origin, mine in zip(origins, visits, strict=True):
            saved_by = max([0.0, *(v for v in mine if v <= t)])
            pending = [c for c in origin.changes if saved_by < c <= t]
            total += (t - pending[0]) if pending else 0.0
    return total / (TIMES.size * len(origins)) / DAY_S


def _cost(origins: list[Origin], visits: list[list[float]]) -> float:
    spent = 0.0
    for origin, mine in zip(origins, visits, strict=True):
        last = max(mine, default=0.0)
        spent += 10.0 * len(mine) + 5.0 * sum(1 for c in origin.changes if 0.0 < c <= last)
    return spent


ORIGINS = [_origin(0, [1000.0, 30000.0, 30500.0, 90000.0]), _origin(1, [50000.0, 120000.0])]


def test_without_workers_the_bound_is_the_age_of_never_visiting() -> None:
    bound = clairvoyant_bound([_case(o) for o in ORIGINS], SAMPLES, 0.0)
    assert bound["age_days"] == pytest.approx(_mean_age(ORIGINS, [[], []]), rel=1e-6)


def test_with_workers_for_every_change_only_the_wait_for_the_next_sample_is_left() -> None:
    bound = clairvoyant_bound([_case(o) for o in ORIGINS], SAMPLES, 1e9)
    assert bound["nu_days_per_worker_s"] == 0.0
    assert bound["age_days"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("budget_s", [15.0, 30.0, 45.0, 60.0])
def test_no_schedule_within_the_budget_beats_the_bound(budget_s: float) -> None:
    cases = [_case(o) for o in ORIGINS]
    bound = clairvoyant_bound(cases, SAMPLES, budget_s)["age_days"]
    instants = [sorted(set(c.group_visit.tolist())) for c in cases]
    best = math.inf
    for first in itertools.chain.from_iterable(
        itertools.combinations(instants[0], k) for k in range(len(instants[0]) + 1)
    ):
        for second in itertools.chain.from_iterable(
            itertools.combinations(instants[1], k) for k in range(len(instants[1]) + 1)
        ):
            visits = [list(first), list(second)]
            if _cost(ORIGINS, visits) <= budget_s:
                best = min(best, _mean_age(ORIGINS, visits))
    assert bound is not None
    assert 0.0 < bound <= best * (1 + 1e-9)
    # a Lagrangian bound: close to the best schedule, not a trivial 0
    assert bound >= 0.5 * best


def test_a_ratio_to_a_bound_of_zero_or_unknown_is_null_never_zero() -> None:
    from app.simulator.report import _ratio

    assert _ratio(0.5, 0.0) is None
    assert _ratio(0.5, None) is None
    assert _ratio(None, 0.1) is None
    assert _ratio(0.5, 0.1) == pytest.approx(5.0)
