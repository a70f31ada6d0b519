"""The simulated world: config files, seeded draws, workers and the truth it measures."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.simulator.config import (
    ConfigError,
    Lister,
    Loader,
    Outage,
    Shares,
    VisitTypeWorld,
    WorldConfig,
    load_config,
)
from app.simulator.truth import Truth
from app.simulator.workers import Order, WorkerPool
from app.simulator.world import DAY_S, Origin, build_world, origin_sizes


def _small(seed: int = 3) -> WorldConfig:
    return WorldConfig(seed=seed, visit_types=[VisitTypeWorld(origins=300)])


def test_same_seed_draws_the_same_world() -> None:
    first, second = build_world(_small(), 20), build_world(_small(), 20)
    for a, b in zip(first[0].origins, second[0].origins, strict=True):
        assert (a.url, a.kind, a.rate_per_day, a.vanish_s) == (
            b.url,
            b.kind,
            b.rate_per_day,
            b.vanish_s,
        )
        assert np.array_equal(a.changes, b.changes)


def test_another_seed_draws_another_world() -> None:
    first, second = build_world(_small(1), 20), build_world(_small(2), 20)
    assert [o.rate_per_day for o in first[0].origins] != [o.rate_per_day for o in second[0].origins]


def test_rates_stay_within_the_configured_bounds_and_changes_are_sorted() -> None:
    world = build_world(_small(), 30)[0]
    vt = world.config
    for origin in world.origins:
        assert np.all(np.diff(origin.changes) >= 0)
        assert np.all(np.diff(origin.commits) >= 1)
        if origin.kind in ("regular", "flaky", "bursty"):
            assert vt.rates.min_per_day <= origin.rate_per_day <= vt.rates.max_per_day


def test_shares_of_kinds_are_roughly_those_configured() -> None:
    config = WorldConfig(
        visit_types=[
            VisitTypeWorld(origins=4000, shares=Shares(dormant=0.1, bursty=0.2, dead=0.1, flaky=0))
        ]
    )
    kinds = [o.kind for o in build_world(config, 10)[0].origins]
    assert kinds.count("bursty") / len(kinds) == pytest.approx(0.2, abs=0.03)
    assert kinds.count("dead") / len(kinds) == pytest.approx(0.1, abs=0.02)
    assert kinds.count("flaky") == 0


def test_new_origins_appear_during_the_run() -> None:
    config = WorldConfig(visit_types=[VisitTypeWorld(origins=10, new_origins_per_day=20)])
    world = build_world(config, 10)[0]
    start = config.start.timestamp()
    new = [o for o in world.origins if o.appear_s > start]
    assert 120 < len(new) < 280
    assert all(o.changes[0] == o.appear_s for o in new)


def test_a_toml_world_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "world.toml"
    path.write_text(
        "seed = 7\nstep_minutes = 30\n[settings]\nabsolute_cooldown_s = 3600\n"
        '[[visit_types]]\nname = "git"\norigins = 10\n'
        '[[visit_types.listers]]\nname = "forge"\nshare = 1\n'
    )
    config = load_config(path)
    assert config.seed == 7
    assert config.settings == {"absolute_cooldown_s": 3600}
    assert config.visit_types[0].listers[0].reports_last_update


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"visit_types": [{"origins": -1}]}', "visit_types.0.origins"),
        ('{"settings": {"database_url": 1}}', "settings"),
        ('{"visit_types": [{"shares": {"dead": 0.9, "flaky": 0.9}}]}', "visit_types.0.shares"),
        ('{"colour": "blue"}', "colour"),
    ],
)
def test_a_bad_world_file_is_refused_naming_the_field(
    tmp_path: Path, text: str, field: str
) -> None:
    path = tmp_path / "world.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(path)


def test_workers_take_queued_visits_as_soon_as_they_are_free() -> None:
    pool = WorkerPool(workers=2, queue_length=4)
    pool.send([Order(i, f"u{i}", i, "p", 0.0) for i in range(4)])
    starts: list[float] = []

    def visit(order: Order, start: float) -> float:
        starts.append(start)
        return 10.0

    pool.work(until=15.0, visit=visit)
    assert starts == [0.0, 0.0, 10.0, 10.0]
    assert pool.depth(15.0) == 2
    assert pool.depth(25.0) == 0


def test_workers_stop_for_a_refill_as_soon_as_a_visit_end_frees_enough_room() -> None:
    pool = WorkerPool(workers=2, queue_length=4)
    pool.send([Order(i, f"u{i}", i, "p", 0.0) for i in range(4)])
    durations = iter([10.0, 30.0, 10.0, 10.0])
    assert pool.advance(0.0, 100.0, lambda o, s: next(durations), room=1) == 10.0
    assert pool.depth(10.0) == 3
    assert pool.advance(10.0, 100.0, lambda o, s: next(durations), room=2) == 20.0


def test_busy_time_counts_only_what_falls_in_the_measured_window() -> None:
    pool = WorkerPool(workers=2, queue_length=4, window=(5.0, 100.0))
    pool.send([Order(i, f"u{i}", i, "p", 0.0) for i in range(3)])
    pool.work(until=200.0, visit=lambda o, s: 10.0)
    assert pool.busy_s == 5.0 + 5.0 + 10.0


def test_no_workers_run_nothing() -> None:
    pool = WorkerPool(workers=0, queue_length=0)
    pool.send([Order(0, "u", 0, "p", 0.0)])
    pool.work(until=100.0, visit=lambda o, s: 1.0)
    assert pool.depth(100.0) == 1
    assert pool.busy_s == 0.0


def _origin(changes: list[float]) -> Origin:
    return Origin(
        0,
        "u",
        "regular",
        1.0,
        0,
        changes[0],
        math.inf,
        -math.inf,
        np.array(changes),
        np.arange(1, len(changes) + 1, dtype=np.int64) * 10,
    )


def test_truth_measures_freshness_age_and_the_lag_of_each_change() -> None:
    day = DAY_S
    truth = Truth(
        [_origin([0.0, 2 * day, 3 * day])], measure_from_s=day, starvation_bound_s=30 * day
    )
    assert truth.sample(day).freshness == 0.0  # never archived
    truth.visited(0, 1 * day, 1 * day, "full", 5.0, "p")
    assert truth.sample(1.5 * day).freshness == 1.0
    late = truth.sample(2.5 * day)
    assert late.freshness == 0.0
    assert late.mean_age_days == pytest.approx(0.5)
    assert truth.new_commits(0, 3.5 * day) == 20
    truth.visited(0, 3.5 * day, 3.5 * day + 60, "full", 60.0, "p")
    assert truth.sample(4 * day).freshness == 1.0
    # changes at day 2 and day 3, archived by the visit ending at 3.5 days + 60 s
    assert sorted(truth.lags_s) == pytest.approx([0.5 * day + 60, 1.5 * day + 60])
    summary = truth.summary(0.0, 4 * day)
    assert summary["useless_visits"]["ratio"] == 0.0
    assert summary["visits"]["by_status"]["full"] == 2


def test_a_visit_that_finds_nothing_new_is_useless() -> None:
    truth = Truth([_origin([0.0])], measure_from_s=0.0, starvation_bound_s=DAY_S)
    truth.visited(0, 10.0, 20.0, "full", 10.0, "p")
    truth.visited(0, 30.0, 40.0, "full", 30.0, "p")
    figures = truth.summary(0.0, DAY_S)["useless_visits"]
    assert figures["ratio"] == 0.5
    assert figures["worker_time_share"] == 0.75
    assert figures["ratio_where_last_update"] is None  # no lister reports last_update


def test_useless_visits_are_counted_apart_where_the_lister_reports_last_update() -> None:
    origins = [_origin([0.0]), replace(_origin([0.0]), index=1, lister=1)]
    truth = Truth(origins, 0.0, DAY_S, reports_last_update=[False, True])
    for index in (0, 1):
        truth.visited(index, 10.0, 20.0, "full", 10.0, "p")
    truth.visited(1, 30.0, 40.0, "full", 10.0, "p")
    figures = truth.summary(0.0, DAY_S)["useless_visits"]
    assert figures["ratio"] == pytest.approx(1 / 3)
    assert figures["ratio_where_last_update"] == 0.5


def test_the_age_and_the_visits_are_split_by_the_true_rate_class() -> None:
    fast = _origin([0.0])  # 1 change a day: class from_1
    slow = replace(_origin([0.0]), index=1, rate_per_day=0.05)
    truth = Truth([fast, slow], measure_from_s=0.0, starvation_bound_s=30 * DAY_S)
    truth.visited(0, 10.0, 20.0, "full", 10.0, "p")
    truth.visited(0, 30.0, 40.0, "full", 30.0, "p")
    sample = truth.sample(DAY_S)  # origin 0 fresh, origin 1 a day old
    assert sample.mean_age_days == pytest.approx(0.5)
    classes = truth.summary(0.0, DAY_S)["by_rate_class"]
    assert classes["0.01_0.1"]["age_days"] == pytest.approx(1.0)
    assert classes["0.01_0.1"]["age_share_days"] == pytest.approx(0.5)
    assert classes["from_1"]["age_days"] == 0.0
    assert classes["from_1"]["visits_per_day"] == 2
    assert classes["from_1"]["useless_ratio"] == 0.5
    assert classes["from_1"]["worker_s_per_day"] == 40.0
    assert classes["below_0.01"]["age_days"] is None  # no origin


def test_an_origin_without_a_successful_visit_beyond_the_bound_is_starved() -> None:
    truth = Truth([_origin([0.0])], measure_from_s=0.0, starvation_bound_s=DAY_S)
    truth.listed(0, 0.0)
    truth.sample(0.5 * DAY_S)
    assert truth.summary(0.0, 3 * DAY_S)["starvation"]["starved_origins"] == 0
    truth.sample(2 * DAY_S)
    assert truth.summary(0.0, 3 * DAY_S)["starvation"]["starved_origins"] == 1


def test_origin_sizes_are_heavy_tailed_with_mean_one() -> None:
    sizes = origin_sizes(np.random.default_rng(5), 100_000, alpha=1.5, size_max=1000.0)
    assert sizes.min() >= 1 / 3
    assert float(np.mean(sizes)) == pytest.approx(1.0, rel=0.15)
    assert float(np.max(sizes)) > 50 * float(np.median(sizes))


def test_turning_origin_sizes_on_changes_no_other_draw() -> None:
    plain = _small()
    sized = plain.model_copy(update={"loader": Loader(size_tail_alpha=1.5)})
    first, second = build_world(plain, 20)[0].origins, build_world(sized, 20)[0].origins
    assert {o.size for o in first} == {1.0}
    assert len({o.size for o in second}) == len(second)
    assert [(o.kind, o.rate_per_day) for o in first] == [(o.kind, o.rate_per_day) for o in second]


def test_a_forge_is_down_only_during_its_outages() -> None:
    lister = Lister(name="forge", share=1, outages=[Outage(start_day=10, days=3)])
    assert [lister.down(d) for d in (9.9, 10, 12.9, 13)] == [False, True, True, False]


def test_an_origin_without_a_successful_visit_beyond_max_interval_is_counted() -> None:
    truth = Truth(
        [_origin([0.0])], measure_from_s=0.0, starvation_bound_s=DAY_S, max_interval_s=2 * DAY_S
    )
    truth.listed(0, 0.0)
    truth.sample(1.5 * DAY_S)
    assert truth.summary(0.0, 3 * DAY_S)["starvation"]["beyond_max_interval"] == 0
    truth.sample(2.5 * DAY_S)
    figures = truth.summary(0.0, 3 * DAY_S)["starvation"]
    assert (figures["starved_origins"], figures["beyond_max_interval"]) == (1, 1)


def test_drift_compares_the_last_third_of_the_run_with_the_middle_third() -> None:
    truth = Truth([_origin([0.0, 0.5 * DAY_S])], measure_from_s=0.0, starvation_bound_s=9 * DAY_S)
    truth.visited(0, 0.0, 1.0, "full", 1.0, "p")
    for day in range(9):
        truth.sample(day * DAY_S)
    drift = truth.drift(0.0, 9 * DAY_S)["age_days"]
    # the change at day 0.5 is never archived: age t - 0.5 on days 3-5 and 6-8
    assert drift["middle_third"] == pytest.approx(3.5)
    assert drift["last_third"] == pytest.approx(6.5)
    assert drift["ratio"] == pytest.approx(6.5 / 3.5)


def test_dormant_origins_wake_together_after_the_given_days() -> None:
    vt = VisitTypeWorld(
        origins=2000,
        shares=Shares(dormant=0.5, bursty=0, dead=0, flaky=0),
        dormant_wake_days=[10, 40],
        dormant_bursty=True,
    )
    config = WorldConfig(visit_types=[vt])
    start = config.start.timestamp()
    origins = build_world(config, 60)[0].origins
    dormant = [o for o in origins if o.kind == "dormant" and o.appear_s < start]
    days = np.array([(o.wake_s - start) / DAY_S for o in dormant])
    assert np.all(((days >= 10) & (days < 11)) | ((days >= 40) & (days < 41)))
    assert 0.4 < float(np.mean(days < 20)) < 0.6
    # bursts: many changes within a burst gap of the one before
    gaps = np.concatenate([np.diff(o.changes[1:]) for o in dormant])
    assert float(np.mean(gaps < 3600)) > 0.5


def test_a_visit_cut_at_the_cap_saves_the_whole_changes_it_fetched() -> None:
    # five changes of 10 commits each (``_origin``), all pending at 10 days
    truth = Truth([_origin([0.0, 1.0, 2.0, 3.0, 4.0])], 0.0, 30 * DAY_S)
    assert truth.reach(0, 10 * DAY_S, most_commits=35) == 3
    truth.visited(0, 10 * DAY_S, 10 * DAY_S + 1, "partial", 1.0, "p", reach=3)
    assert truth.new_commits(0, 11 * DAY_S) == 20
    assert truth.sample(11 * DAY_S).freshness == 0.0  # two changes still missing
    assert truth.reach(0, 11 * DAY_S, most_commits=1000) == 5


def test_a_visit_saves_at_least_one_change_however_large() -> None:
    truth = Truth([_origin([0.0, 1.0])], 0.0, 30 * DAY_S)
    assert truth.reach(0, DAY_S, most_commits=3) == 1


def test_the_loader_fetches_what_fits_between_its_fixed_time_and_its_cap() -> None:
    loader = Loader(base_s=0.5, per_commit_s=0.1, cap_s=30.0)
    assert loader.fetchable_commits() == pytest.approx(295.0)
    assert loader.visit_s(loader.fetchable_commits() * 2, size=2.0) == pytest.approx(
        loader.scale * 2 * 30.0
    )
    assert Loader(per_commit_s=0.0).fetchable_commits() == math.inf


def test_commit_fetching_is_counted_apart_from_first_visits_and_failures() -> None:
    truth = Truth([_origin([0.0, 2 * DAY_S])], 0.0, 30 * DAY_S)
    truth.visited(0, DAY_S, DAY_S + 9, "full", 9.0, "p", fetch_s=8.0)  # the first fetch
    truth.visited(0, 3 * DAY_S, 3 * DAY_S + 5, "failed", 5.0, "p")
    truth.visited(0, 4 * DAY_S, 4 * DAY_S + 5, "full", 5.0, "p", fetch_s=4.0)
    visits = truth.summary(0.0, 2 * DAY_S)["visits"]
    assert visits["first_fetch_worker_s_per_day"] == pytest.approx(9.0 / 2)
    assert visits["fetch_worker_s_per_day"] == pytest.approx(4.0 / 2)
    assert visits["worker_s_per_day"] == pytest.approx(19.0 / 2)


def test_useless_floor_visits_are_told_apart_where_the_lister_reports_last_update() -> None:
    origin = replace(_origin([0.0]), lister=1)
    truth = Truth(
        [origin], 0.0, DAY_S, max_interval_s=10 * DAY_S, reports_last_update=[False, True]
    )
    truth.visited(0, DAY_S, DAY_S, "full", 1.0, "p")
    truth.visited(0, 2 * DAY_S, 2 * DAY_S, "full", 1.0, "p")  # a day later: useless
    truth.visited(0, 11 * DAY_S, 11 * DAY_S, "full", 1.0, "p")  # 9 days on: the floor's
    figures = truth.summary(0.0, 12 * DAY_S)["useless_visits"]
    assert figures["ratio_where_last_update"] == pytest.approx(2 / 3)
    assert figures["floor_share_where_last_update"] == pytest.approx(1 / 2)
