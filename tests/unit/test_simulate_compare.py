"""The comparison harness's pure parts: command line, configurations, medians."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from app.simulator.config import VisitTypeWorld, WorldConfig, load_config
from benchmarks.simulate_compare import (
    BASELINES,
    DEFAULT_WORLDS,
    REFERENCE,
    WORLDS,
    configure,
    main,
    parse_policies,
    parse_world,
    summarise,
    write_results,
)

WORLD = WorldConfig(
    seed=4,
    visit_types=[
        VisitTypeWorld(name="git", policies={"seed000_mixing": 1}),
        VisitTypeWorld(name="hg"),
    ],
)


@pytest.mark.parametrize("entry", DEFAULT_WORLDS)
def test_every_default_world_file_loads(entry: str) -> None:
    path, days = parse_world(str(WORLDS / entry))
    assert load_config(Path(path)).visit_types
    assert days in (90.0, 180.0)


def test_a_world_may_name_its_length_in_days() -> None:
    assert parse_world("w.toml:180") == ("w.toml", 180.0)
    assert parse_world("w.toml") == ("w.toml", 90.0)


def test_policies_override_every_visit_type_or_each_by_name() -> None:
    _, weights = parse_policies('all={"seed000_mixing": 1}')
    assert [vt.policies for vt in configure(WORLD, 9, weights).visit_types] == [
        {"seed000_mixing": 1},
        {"seed000_mixing": 1},
    ]
    _, by_type = parse_policies('hg={"hg": {"origins_without_last_update": 1}}')
    config = configure(WORLD, 9, by_type)
    assert config.seed == 9
    assert [vt.policies for vt in config.visit_types] == [
        {"seed000_mixing": 1},
        {"origins_without_last_update": 1},
    ]


def test_keywords_keep_the_world_s_policies_or_take_the_defaults() -> None:
    assert configure(WORLD, 4, "world").visit_types[0].policies == {"seed000_mixing": 1}
    assert configure(WORLD, 4, "default").visit_types[0].policies is None
    reference = configure(WORLD, 4, parse_policies("r=reference")[1])
    assert reference.visit_types[1].policies == REFERENCE
    assert configure(WORLD, 4, "default").settings.get("failed_retry_s") is None


def test_the_reference_configuration_rests_every_failed_visit_the_failed_cooldown() -> None:
    reference = configure(WORLD, 4, "reference")
    assert reference.settings["failed_retry_s"] == 14 * 86400.0
    own = WORLD.model_copy(update={"settings": {"failed_cooldown_s": 7 * 86400.0}})
    assert configure(own, 4, "reference").settings["failed_retry_s"] == 7 * 86400.0


@pytest.mark.parametrize("arg", ["noequals", 'x={"no_such_policy": 1}', "x=[1]", "x={bad"])
def test_a_bad_configuration_is_refused(arg: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_policies(arg)


def _result(name: str, seed: int, age: float | None, spec: Any = "default") -> dict[str, Any]:
    figures: dict[str, Any] = {
        "age_days": age,
        "age_days_by_lister": {"last_update": age, "no_last_update": age},
        "freshness": 0.5,
        "worker_utilisation": 0.9,
        "visits": {"per_day": 100.0},
        "lag_days": {"mean": 1.0},
        "clairvoyant_bound": {
            "age_days": 0.1,
            "policy_age_ratio": None if age is None else age / 0.1,
        },
        "starvation": {"beyond_max_interval": seed},
        "useless_visits": {"ratio_where_last_update": None},
        "first_visit_hours": {"p99": 1.0, "max": 2.0, "not_visited_within_7_days": 0},
        "save_code_now_hours": {"p99": 0.5},
        "drift": {"age_days": {"ratio": 1.0}, "freshness": {"ratio": 1.0}},
    }
    return {
        "world": "w/default.toml",
        "days": 90.0,
        "seed": seed,
        "name": name,
        "policies": spec,
        "report": {
            "visit_types": {"git": figures},
            "run": {"wall_clock_s": 60.0, "load_average": [1.0, 2.0]},
        },
    }


def test_the_baselines_are_round_robin_and_the_rate_only_allocation_of_the_true_rates() -> None:
    round_robin = configure(WORLD, 4, "round_robin")
    # the simulator sends round-robin's visits itself, as the oracle's: a query
    # policy whose resting origins lead its order would leave the batch to the
    # pools, which serve the changes the forges report
    assert round_robin.round_robin
    assert [vt.policies for vt in round_robin.visit_types] == [None, None]
    assert not round_robin.rate_only_oracle
    oracle = configure(WORLD, 4, "oracle")
    assert oracle.rate_only_oracle
    # the defaults' policies, for their cooldowns: the oracle picks the visits
    assert [vt.policies for vt in oracle.visit_types] == [None, None]
    assert not oracle.oracle_rates
    assert not oracle.round_robin
    assert not configure(WORLD, 4, "default").rate_only_oracle
    assert not configure(WORLD, 4, "default").round_robin


def test_the_oracle_planner_is_a_diagnostic_run_only_when_named() -> None:
    planner = configure(WORLD, 4, "oracle_planner")
    assert [vt.policies for vt in planner.visit_types] == [None, None]
    assert planner.oracle_rates
    assert not planner.rate_only_oracle
    assert "oracle_planner" not in BASELINES.values()
    assert parse_policies("diag=oracle_planner") == ("diag", "oracle_planner")


def test_a_policy_is_measured_against_the_better_baseline_of_the_same_seed() -> None:
    results = [
        _result("age", 0, 1.0),
        _result("round_robin", 0, 4.0, "round_robin"),
        _result("oracle", 0, 2.0, "oracle"),
        _result("age", 1, 3.0),
        _result("round_robin", 1, 3.0, "round_robin"),
        _result("oracle", 1, 6.0, "oracle"),
    ]
    rows = summarise(results)["default (90 days)"]
    assert rows["age / git"]["age / best baseline"] == pytest.approx((0.5 + 1.0) / 2)
    assert rows["age / git"]["best baseline"] == "oracle 1, round_robin 1"
    assert rows["age / git"]["age / bound"] == pytest.approx(20.0)


def test_tables_hold_the_median_over_seeds_of_each_configuration() -> None:
    results = [_result("ref", s, a) for s, a in ((0, 1.0), (1, 3.0), (2, 2.0))]
    results += [_result("new", 0, None)]
    rows = summarise(results)["default (90 days)"]
    assert rows["ref / git"]["mean age (d)"] == 2.0
    assert rows["ref / git"]["> max_interval"] == 1.0
    assert rows["ref / git"]["runs"] == 3
    assert rows["new / git"]["mean age (d)"] is None


def test_saved_runs_can_be_tabled_again_without_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.json"
    write_results(path, [_result("ref", 0, 1.0), _result("new", 0, 0.5)])
    assert main(["--tables-only", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "default (90 days)" in out
    assert "new / git" in out
    assert "0.5" in out  # the mean age over the baseline's
    assert "median 60 s" in out
