"""The simulator against real PostgreSQL and Redis: reproducible, and sane at the extremes."""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from app.db.connection import DictConnection, connect
from app.db.scheduling import mark_scheduled
from app.domain.allocation import optimal_interval_s
from app.domain.policies import reference_policies
from app.services.context import Context
from app.settings import Settings
from app.simulator.config import (
    Lister,
    Outage,
    RateDistribution,
    Shares,
    VisitTypeWorld,
    WorldConfig,
)
from app.simulator.engine import Simulation
from app.simulator.report import PLOT_FILE, REPORT_FILE, write_report
from app.simulator.runner import run_world
from app.simulator.workers import Order
from app.simulator.world import DAY_S
from tests.integration.helpers import list_origins

pytestmark = pytest.mark.integration

NO_ODDITIES = Shares(dormant=0, bursty=0, dead=0, flaky=0)


def _world(**vt: Any) -> WorldConfig:
    top = {k: vt.pop(k) for k in ("settings", "warm_start_days", "burn_in_days") if k in vt}
    defaults: dict[str, Any] = {
        "origins": 60,
        "workers": 1,
        "new_origins_per_day": 4,
        "requests_per_day": 3,
        "listers": [
            Lister(name="forge", share=0.6, delay_hours=1),
            Lister(name="registry", share=0.4, reports_last_update=False, period_hours=48),
        ],
    }
    return WorldConfig(
        seed=11,
        step_minutes=30,
        burn_in_days=top.pop("burn_in_days", 1),
        visit_types=[VisitTypeWorld(**{**defaults, **vt})],
        **top,
    )


@pytest.fixture
def second_database(
    service_env: dict[str, str], template_dsn: str, settings: Settings
) -> Iterator[tuple[DictConnection, Settings]]:
    """Another empty database and Redis namespace, for a second run."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = service_env["REVISIT_DATABASE_URL"]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"create database {name} template revisit_template")  # type: ignore[arg-type]
    info = psycopg.conninfo.conninfo_to_dict(admin)
    info["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
    other = Settings.model_validate(
        {**settings.model_dump(), "database_url": dsn, "redis_namespace": "second"}
    )
    with connect(other) as conn:
        yield conn, other
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"drop database if exists {name} with (force)")  # type: ignore[arg-type]


def _reverse_physical_order(conn: DictConnection) -> None:
    """Rewrite every stats row, newest id first, as autovacuum and updates reorder a
    table's heap in a long run: ``UPDATE ... RETURNING`` then yields another order."""
    ids = [r["id"] for r in conn.execute("select id from origin_visit_stats order by id desc")]
    for origin in ids:
        conn.execute("update origin_visit_stats set url = url where id = %s", (origin,))


def test_same_world_and_seed_give_the_same_report(
    conn: DictConnection, settings: Settings, second_database: tuple[DictConnection, Settings]
) -> None:
    config = _world(shares=Shares(dormant=0.1, bursty=0.1, dead=0.1, flaky=0.1))
    _, first = run_world(conn, settings, config, 4)
    other_conn, other_settings = second_database
    steps = iter(range(10**6))

    def disturb(t: float) -> None:
        if next(steps) % 6 == 0:
            _reverse_physical_order(other_conn)

    _, second = run_world(other_conn, other_settings, config, 4, disturb)
    first.pop("run")
    second.pop("run")
    assert first["visit_types"]["git"]["visits"]["per_day"] > 0
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_capacity_for_hourly_visits_keeps_the_archive_nearly_fresh(
    conn: DictConnection, settings: Settings
) -> None:
    # The reference's weights serve every pool whenever a worker is free;
    # age_optimal leaves an origin whose forge reports last_update until a
    # listing reports a change (0.92 here, with a daily listing).
    config = _world(
        workers=60,
        prefetch=60,
        rates=RateDistribution(max_per_day=1.0),
        shares=NO_ODDITIES,
        settings={"absolute_cooldown_s": 3600},
        policies=reference_policies("git"),
    )
    config = config.model_copy(update={"loader": config.loader.model_copy(update={"scale": 1.0})})
    _, report = run_world(conn, settings, config, 3)
    figures = report["visit_types"]["git"]
    assert figures["freshness"] > 0.95
    # what age is left is mostly new origins waiting for their lister's next run
    assert figures["age_days"] < 0.1
    assert figures["first_visit_hours"]["never_visited"] == 0


def test_without_capacity_freshness_falls_to_zero(conn: DictConnection, settings: Settings) -> None:
    config = _world(
        workers=0,
        request_workers=0,
        rates=RateDistribution(min_per_day=2.0, max_per_day=10.0),
        shares=NO_ODDITIES,
        warm_start_days=1,
    )
    sim, report = run_world(conn, settings, config, 3)
    truth = sim.types["git"].truth
    assert truth.samples[0].freshness > 0.1
    assert truth.samples[-1].freshness < 0.02
    assert report["visit_types"]["git"]["visits"]["per_day"] == 0


def test_save_code_now_requests_are_served_through_postgres(
    conn: DictConnection, settings: Settings
) -> None:
    config = _world(requests_per_day=20, burn_in_days=0)
    _, report = run_world(conn, settings, config, 2)
    done = report["visit_types"]["git"]["save_code_now_hours"]["requests_done"]
    assert done > 10
    assert report["requests_finished_in_postgres"] == done
    statuses = conn.execute("select status::text, count(*) from visit_requests group by 1")
    assert {r["status"] for r in statuses} <= {"succeeded", "failed", "scheduled", "running"}


def test_a_run_writes_its_report_and_plots(
    conn: DictConnection, settings: Settings, tmp_path: Path
) -> None:
    sim, report = run_world(conn, settings, _world(), 2)
    files = write_report(report, sim, tmp_path)
    assert files == [tmp_path / REPORT_FILE, tmp_path / PLOT_FILE]
    written = json.loads((tmp_path / REPORT_FILE).read_text())
    git = written["visit_types"]["git"]
    assert 0 <= git["clairvoyant_bound"]["age_days"] <= git["age_days"]
    assert 0 < git["worker_utilisation"] <= 1
    assert (tmp_path / PLOT_FILE).read_bytes()[:4] == b"\x89PNG"


def test_scheduled_rows_come_back_in_the_order_they_were_picked(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [f"https://forge.example/o{i}" for i in range(40)])
    _reverse_physical_order(conn)
    ids = [r["id"] for r in conn.execute("select id from origin_visit_stats")]
    picked = [ids[k] for k in random.Random(3).sample(range(len(ids)), len(ids))]
    rows = mark_scheduled(conn, picked, datetime(2025, 1, 1, tzinfo=UTC))
    assert [r["id"] for r in rows] == picked


def test_every_request_outcome_is_applied_by_the_journal_code(
    conn: DictConnection, settings: Settings
) -> None:
    # few origins, visited many times a day: a request's visit must be numbered
    # among the recurrent ones, not before the kept history
    config = _world(
        origins=8,
        workers=4,
        new_origins_per_day=0,
        requests_per_day=30,
        burn_in_days=0,
        settings={"absolute_cooldown_s": 1800},
    )
    _, report = run_world(conn, settings, config, 2)
    figures = report["visit_types"]["git"]
    assert figures["save_code_now_hours"]["requests_done"] > 30
    assert figures["journal_beyond_history"] == 0
    assert (
        report["requests_finished_in_postgres"] == figures["save_code_now_hours"]["requests_done"]
    )


def test_during_a_forge_outage_its_visits_fail_and_its_lister_waits(
    conn: DictConnection, settings: Settings
) -> None:
    outage = Outage(start_day=0.5, days=2)
    config = _world(
        shares=NO_ODDITIES,
        requests_per_day=0,
        new_origins_per_day=20,
        listers=[Lister(name="forge", share=1, period_hours=6, outages=[outage])],
        # weights that visit up-to-date origins too: age_optimal waits for a
        # listing to report a change, and the outage stops the listings
        policies=reference_policies("git"),
    )
    sim, report = run_world(conn, settings, config, 2.5)
    by_status = report["visit_types"]["git"]["visits"]["by_status"]
    assert by_status["failed"] > 0
    assert by_status.get("full", 0) == 0
    listed = sim.types["git"].truth.listed_at
    start = sim.start_s + 0.5 * DAY_S
    assert not np.any((listed >= start) & (listed < start + 2 * DAY_S))
    assert np.any(listed >= start + 2 * DAY_S)


def test_the_age_of_flaky_origins_is_reported_apart_from_the_rest(
    conn: DictConnection, settings: Settings
) -> None:
    config = _world(
        workers=4,
        shares=Shares(dormant=0, bursty=0, dead=0, flaky=0.5),
        rates=RateDistribution(min_per_day=0.5, max_per_day=5.0),
    )
    config = config.model_copy(
        update={"loader": config.loader.model_copy(update={"flaky_failure_probability": 0.8})}
    )
    _, report = run_world(conn, settings, config, 5)
    figures = report["visit_types"]["git"]
    by_kind = figures["age_days_by_kind"]
    assert set(by_kind) == {"regular", "flaky"}
    # a failed visit rests (1 day, doubled per failure in a row): flaky origins fall behind
    assert by_kind["flaky"] > by_kind["regular"]
    assert figures["age_days_without_flaky"] < figures["age_days"]
    assert abs(figures["age_days_without_flaky"] - by_kind["regular"]) < 1e-9


#: A loaded little world: 1 worker for 600 origins changing 0.1 to 10 times a day
#: (their changes alone would take the worker three days a day to fetch).
LOADED = {
    "origins": 600,
    "new_origins_per_day": 2,
    "requests_per_day": 1,
    "rates": RateDistribution(min_per_day=0.1, max_per_day=10.0),
}


@pytest.mark.parametrize(
    "policies",
    [None, reference_policies("git"), {"oldest_scheduled_first": 1.0}, "oracle", "round_robin"],
    ids=["age_optimal", "reference", "oldest_scheduled_first", "oracle", "round_robin"],
)
def test_no_policy_beats_the_clairvoyant_bound_and_the_busy_workers_are_reported(
    conn: DictConnection, settings: Settings, policies: Any
) -> None:
    baseline = policies in ("oracle", "round_robin")
    config = _world(**LOADED, policies=None if baseline else policies)
    config = config.model_copy(
        update={"rate_only_oracle": policies == "oracle", "round_robin": policies == "round_robin"}
    )
    _, report = run_world(conn, settings, config, 4)
    git = report["visit_types"]["git"]
    bound = git["clairvoyant_bound"]
    assert 0 < bound["age_days"] < git["age_days"]
    assert bound["policy_age_ratio"] == pytest.approx(git["age_days"] / bound["age_days"])
    # the rate-only optimum: a figure or the reason there is none, within the workers' time
    assert (git["rate_only_optimum"] is None) == (git["rate_only_optimum_reason"] is not None)
    capacity_per_day = config.visit_types[0].workers * DAY_S
    assert git["rate_only_optimum_budget"]["worker_s_per_day"] <= capacity_per_day * (1 + 1e-9)
    # a backlog keeps the worker busy: the scheduler refills as soon as a visit ends
    assert git["worker_utilisation"] > 0.9


def test_the_oracle_planner_diagnostic_plans_with_the_true_change_rates(
    conn: DictConnection, settings: Settings
) -> None:
    config = _world(**LOADED, shares=NO_ODDITIES).model_copy(update={"oracle_rates": True})
    sim, _ = run_world(conn, settings, config, 2)
    true = {o.url: o.rate_per_day for o in sim.types["git"].world.origins}
    rows = conn.execute(
        "select url, change_rate_per_day from origin_visit_stats"
        " where change_rate_per_day is not null"
    ).fetchall()
    assert len(rows) > 50
    assert all(r["change_rate_per_day"] == pytest.approx(true[r["url"]]) for r in rows)


#: A world of 40 origins visited a few times a day: no failures, no requests,
#: none appearing or leaving, the absolute cooldown under every interval.
STEADY = {
    "origins": 40,
    "new_origins_per_day": 0,
    "disappearing_per_day": 0,
    "requests_per_day": 0,
    "rates": RateDistribution(min_per_day=0.05, max_per_day=3.0),
    "shares": NO_ODDITIES,
    "settings": {"absolute_cooldown_s": 600},
}


def _oracle(config: WorldConfig) -> WorldConfig:
    loader = config.loader.model_copy(update={"scale": 1500.0})  # 100 visits a day
    return config.model_copy(update={"rate_only_oracle": True, "loader": loader})


def _oracle_visits(
    conn: DictConnection, settings: Settings, config: WorldConfig, days: float
) -> tuple[Simulation, dict[int, list[float]]]:
    """The oracle's simulation and the start of every visit, by origin index."""
    sim = Simulation(conn, settings, config, days)
    oracle = sim.oracles["git"].oracle
    starts: dict[int, list[float]] = {}
    visited = oracle.visited

    def record(index: int, start: float) -> None:
        starts.setdefault(index, []).append(start)
        visited(index, start)

    oracle.visited = record  # type: ignore[method-assign]
    sim.run()
    return sim, starts


def test_the_oracle_baseline_spaces_each_origin_s_visits_evenly_by_its_true_rate(
    conn: DictConnection, settings: Settings
) -> None:
    config = _oracle(_world(**STEADY, warm_start_days=1))
    sim, starts = _oracle_visits(conn, settings, config, 5)
    oracle = sim.oracles["git"].oracle
    assert math.isfinite(oracle.multiplier_s2)
    rates = oracle.true_rates_per_s(sim.end_s)
    # every interval is the age-optimal one of the origin's true rate
    for rate, interval in zip(rates, oracle.interval_s, strict=True):
        assert interval == optimal_interval_s(rate, oracle.multiplier_s2, oracle.floor_s)
    # ... and each origin's visits follow it, every interval stretched alike
    shares = []
    for index, times in starts.items():
        gaps = np.diff([t for t in times if t >= sim.measure_from_s])
        if gaps.size >= 2:
            shares += list(gaps / oracle.interval_s[index])
    assert len(shares) > 100
    low, middle, high = np.percentile(shares, [5, 50, 95])
    assert high / low < 1.3
    # the worker time was planned right: the intervals are hardly stretched
    assert 0.8 < middle < 1.25


def test_the_oracle_baseline_ignores_last_update(
    conn: DictConnection, settings: Settings, second_database: tuple[DictConnection, Settings]
) -> None:
    reported = _oracle(_world(**STEADY))
    unreported = _oracle(
        _world(
            **STEADY,
            listers=[
                Lister(name="forge", share=0.6, delay_hours=1, reports_last_update=False),
                Lister(name="registry", share=0.4, reports_last_update=False, period_hours=48),
            ],
        )
    )
    _, with_last_update = run_world(conn, settings, reported, 2)
    other_conn, other_settings = second_database
    _, without = run_world(other_conn, other_settings, unreported, 2)
    figures = [report["visit_types"]["git"] for report in (with_last_update, without)]
    assert figures[0]["visits"]["per_day"] > 50
    for split in figures:  # the worker time by lister, which the worlds split apart
        split["visits"].pop("worker_s_per_day_by_kind")
    for name in ("visits", "age_days", "freshness", "lag_days"):
        assert figures[0][name] == figures[1][name]


def test_a_failed_visit_leaves_the_oracle_s_origin_due_until_its_rest_ends(
    conn: DictConnection, settings: Settings
) -> None:
    flaky = {**STEADY, "shares": Shares(dormant=0, bursty=0, dead=0, flaky=1.0)}
    flaky["settings"] = {"absolute_cooldown_s": 600, "failed_retry_s": 600}
    config = _oracle(_world(**flaky, warm_start_days=1))
    loader = config.loader.model_copy(update={"flaky_failure_probability": 0.4})
    sim = Simulation(conn, settings, config.model_copy(update={"loader": loader}), 3)
    visits: list[tuple[int, float, str]] = []
    outcome = sim._outcome

    def record(name: str, order: Order, start: float) -> tuple[str, float, int | None]:
        result = outcome(name, order, start)
        visits.append((order.index, start, result[0]))
        return result

    sim._outcome = record  # type: ignore[method-assign]
    sim.run()
    interval = sim.oracles["git"].oracle.interval_s
    shares: dict[str, list[float]] = {"full": [], "failed": []}
    last: dict[int, tuple[float, str]] = {}
    for index, start, status in visits:
        if index in last and last[index][1] in shares:
            shares[last[index][1]].append((start - last[index][0]) / interval[index])
        last[index] = (start, status)
    assert len(shares["failed"]) > 20
    # retried once rested, where a success waits its interval
    assert np.median(shares["failed"]) < 0.5 * np.median(shares["full"])
