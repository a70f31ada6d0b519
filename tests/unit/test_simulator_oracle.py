"""The oracle baseline's allocation and ranking (app.simulator.oracle), without servers."""

from __future__ import annotations

import math

import numpy as np

from app.domain.allocation import optimal_interval_s
from app.simulator.config import Loader
from app.simulator.oracle import RateOnlyOracle, rate_classes
from app.simulator.world import DAY_S, Origin

FLOOR_S = 57.6 * DAY_S


def _origin(index: int, rate_per_day: float, kind: str = "regular") -> Origin:
    return Origin(
        index=index,
        url=f"https://forge/{index}",
        kind=kind,
        rate_per_day=rate_per_day,
        lister=0,
        appear_s=0.0,
        vanish_s=math.inf,
        wake_s=-math.inf,
        changes=np.array([0.0]),
        commits=np.array([10]),
    )


def _oracle(rates: list[float], workers: int = 1) -> RateOnlyOracle:
    origins = [_origin(k, r) for k, r in enumerate(rates)]
    return RateOnlyOracle(origins, Loader(), workers, FLOOR_S)


def test_the_intervals_spend_the_worker_time_the_fetching_leaves() -> None:
    oracle = _oracle([0.1, 1.0, 3.0, 0.0] * 50)
    oracle.plan(0.0, np.ones(200, dtype=bool))
    loader = Loader()
    rates = oracle.true_rates_per_s(0.0)
    fixed = loader.scale * loader.base_s / oracle.interval_s
    fetching = loader.scale * loader.per_commit_s * loader.commits_per_change * rates
    assert math.isclose(float(np.sum(fixed + fetching)), 1.0, rel_tol=1e-3)  # one worker
    for rate, interval in zip(rates, oracle.interval_s, strict=True):
        assert interval == optimal_interval_s(rate, oracle.multiplier_s2, FLOOR_S)
    # a faster changer is visited more often; one that never changes gets the floor
    assert oracle.interval_s[2] < oracle.interval_s[1] < oracle.interval_s[0] < FLOOR_S
    assert oracle.interval_s[3] == FLOOR_S


def test_when_fetching_alone_takes_the_workers_every_origin_gets_the_floor() -> None:
    oracle = _oracle([5.0] * 200)  # 200 x 5 x 3 commits x 30 worker-s a day: 1.04 workers
    oracle.plan(0.0, np.ones(200, dtype=bool))
    assert oracle.multiplier_s2 == math.inf
    assert (oracle.interval_s == FLOOR_S).all()


def test_never_visited_origins_come_first_then_the_furthest_through_their_interval() -> None:
    oracle = _oracle([1.0, 1.0, 1.0, 1.0])
    oracle.interval_s = np.array([10.0, 100.0, 10.0, 10.0])
    for index, start in ((0, 95.0), (1, 0.0), (2, 50.0)):
        oracle.visited(index, start)
    listed_at = np.array([0.0, 0.0, 0.0, 99.0])
    # origin 3: never visited; then 2 (5 intervals late), 0 (0.5), 1 (1.0)
    assert oracle.ranking(100.0, listed_at).tolist() == [3, 2, 1, 0]
    # an origin not listed yet is not a candidate
    listed_at[3] = 101.0
    assert oracle.ranking(100.0, listed_at).tolist() == [2, 1, 0]


def test_round_robin_gives_every_origin_the_floor_and_ranks_the_longest_unvisited_first() -> None:
    origins = [_origin(k, r) for k, r in enumerate([10.0, 0.01, 1.0, 0.0])]
    round_robin = RateOnlyOracle(origins, Loader(), 1, FLOOR_S, uniform=True)
    round_robin.plan(0.0, np.ones(4, dtype=bool))
    assert (round_robin.interval_s == FLOOR_S).all()
    assert round_robin.policy == "round_robin"
    for index, start in enumerate([30.0, 10.0, 20.0, 40.0]):
        round_robin.visited(index, start)
    # the slow changer first, the fast one third: rates play no part
    assert round_robin.ranking(100.0, np.zeros(4)).tolist() == [1, 2, 0, 3]


def test_rate_classes_keep_the_total_weight_and_its_weighted_rate() -> None:
    rates = np.array([0.0, 1e-6, 1.01e-6, 3e-5, 0.0])
    weights = np.array([1.0, 2.0, 2.0, 4.0, 3.0])
    classes = rate_classes(rates, weights)
    assert classes[0] == (0.0, 4.0)
    assert math.isclose(sum(w for _, w in classes), weights.sum())
    assert math.isclose(sum(r * w for r, w in classes), float(rates @ weights))
    assert len(classes) == 3
