"""Issue 7's proof: revisit's processes scraped by a real Prometheus, and every
dashboard query and alert expression evaluated through its HTTP API."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.db.policies import set_policies
from app.devtools.demo import commit, make_repo
from app.domain.policies import reference_policies
from app.inputs.api import RequestVisit
from app.inputs.listing import ListedOriginIn
from app.kafka.client import producer_config
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.requests import create_request
from app.settings import Settings
from monitoring.dashboard import panels
from monitoring.prometheus_api import api, finite_points, query_range, with_rate_window
from tests.conftest import IN_CI
from tests.processes import running, wait_for, with_constants

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus"
RATE_WINDOW = "20s"
#: Comparison operators of PromQL, to turn a filtering alert condition into one
#: that keeps every series it compares (``a > 5`` -> ``a > bool 5``).
COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(?!\s*bool)(?=[\s\d(])")


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (scripts/setup installs it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_promtool_accepts_the_scrape_config_and_the_alert_rules() -> None:
    promtool = _binary("promtool")
    for check, name in (("config", "prometheus.yml"), ("rules", "alerts.yml")):
        proc = subprocess.run(
            [promtool, "check", check, str(PROMETHEUS_DIR / name)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_alert_conditions_become_series_keeping_comparisons() -> None:
    expr = "sum(rate(a[5m])) > 0 and on() sum(b) == 0 and c >= bool 1"
    assert COMPARISON.sub(r"\1 bool", expr) == (
        "sum(rate(a[5m])) > bool 0 and on() sum(b) == bool 0 and c >= bool 1"
    )


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, dict[str, int]]]:
    """A Prometheus scraping revisit's metrics ports every second, with the alert rules."""
    binary = _binary("prometheus")
    ports = {name: _free_port() for name in ("scheduler", "journal", "worker", "prometheus")}
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(PROMETHEUS_DIR / "alerts.yml")],
        "scrape_configs": [
            {
                "job_name": f"revisit-{name}",
                "static_configs": [{"targets": [f"127.0.0.1:{ports[name]}"]}],
            }
            for name in ("scheduler", "journal", "worker")
        ],
    }
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    url = f"http://127.0.0.1:{ports['prometheus']}"
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return proc.poll() is not None

    try:
        wait_for(ready, 60, "Prometheus to be ready")
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
        yield url, ports
    finally:
        proc.terminate()
        proc.wait(30)


def _list_forge(conn: DictConnection, ctx: Context, urls: list[str], gone: str) -> None:
    """Half the origins with a forge-reported last update (the never_visited pool),
    the other half without (no_last_update), and one that does not exist."""
    lister_id = register_lister(conn, "test", "forge", None)
    recent = datetime.now(tz=UTC) - timedelta(minutes=5)
    rows = [
        (i + 1, ListedOriginIn(url=u, visit_type="git", last_update=recent if i % 2 else None))
        for i, u in enumerate([*urls, gone])
    ]
    record_listed_origins(conn, ctx, lister_id, rows, datetime.now(tz=UTC))


def _every_target_has_data(url: str, start: float) -> list[str]:
    """The dashboard queries that have no finite sample since ``start``."""
    empty = []
    for panel in panels():
        for target in panel.targets:
            expr = with_rate_window(target.expr, RATE_WINDOW)
            if not finite_points(query_range(url, expr, start, time.time(), 2)):
                empty.append(f"{panel.title}: {expr}")
    return empty


def test_prometheus_scrapes_every_process_and_every_panel_and_alert_has_data(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    tmp_path: Path,
    prometheus: tuple[str, dict[str, int]],
) -> None:
    url, ports = prometheus
    # The schedule drift (seed 000) is that of the ladder's queue position, which
    # only the reference's weights advance: age_optimal plans by real time.
    set_policies(conn, "git", reference_policies("git"))
    repos = [tmp_path / "forge" / f"r{i}" for i in range(6)]
    urls = [make_repo(path) for path in repos]
    constants = {
        "actors.scheduler.POLL_INTERVAL_S": 0.2,
        "monitoring.coverage.REFRESH_INTERVAL_S": 1,
        "monitoring.coverage.POOLS_BY_LISTER_INTERVAL_S": 1,
        "monitoring.coverage.NEVER_VISITED_THRESHOLD_S": 1,
    }
    env = with_constants(
        constants,
        {
            "REVISIT_LADDER_UNIT_S": "1",
        },
    )
    commands = {
        "scheduler": ["revisit", "scheduler"],
        "worker": ["revisit", "worker", "--lane", "all", "--processes", "2", "--threads", "2"],
        # As the Procfile runs it: one endpoint for two client processes.
        "journal": ["revisit", "journal", "--processes", "2"],
    }
    # Each its own port, as the Procfile gives them.
    commands = {
        name: ["env", f"REVISIT_METRICS_PORT={ports[name]}", *argv]
        for name, argv in commands.items()
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    start = time.time()
    with running(commands, env, logs):
        # Work starts once Prometheus scrapes every process, so that it sees
        # the first visits and the request happen (a rate needs two samples).
        wait_for(lambda: _targets_up(url) == 3, 60, "Prometheus to scrape every process", logs)
        _list_forge(conn, ctx, urls, (tmp_path / "forge" / "gone").as_uri())
        create_request(conn, RequestVisit(url=urls[0], visit_type="git", kind="save_code_now"))
        producer = Producer(producer_config(settings))
        producer.produce(settings.journal_topic, value=b"not a visit status")
        assert producer.flush(30) == 0
        wait_for(
            lambda: conn.execute(
                "select count(*) = 7 as done from origin_visit_stats where last_visit is not null"
            ).fetchone()["done"],  # type: ignore[index]
            120,
            "a first visit of every listed origin",
            logs,
        )
        for repo in repos[:2]:
            commit(repo, "new work")
        empty: list[str] = []

        def all_panels_have_data() -> bool:
            nonlocal empty
            empty = _every_target_has_data(url, start)
            return not empty

        try:
            wait_for(all_panels_have_data, 120, "data in every dashboard query", logs)
        except AssertionError as exc:
            raise AssertionError(f"panels without data: {empty}") from exc
        if os.environ.get("REVISIT_TEST_DASHBOARD_PNG"):
            # The README's picture: a few minutes of work (commits, requests) first.
            from monitoring.render import render_png

            for i in range(int(os.environ.get("REVISIT_TEST_DASHBOARD_SECONDS", "120")) // 5):
                commit(repos[i % 3], f"change {i}")
                if i % 4 == 0:
                    create_request(conn, RequestVisit(url=urls[i % 6], visit_type="git"))
                time.sleep(5)

            render_png(
                url,
                Path(os.environ["REVISIT_TEST_DASHBOARD_PNG"]),
                start,
                time.time(),
                2,
                RATE_WINDOW,
            )
        _assert_targets_up_and_rules_read_series(url)


def _targets_up(url: str) -> int:
    return sum(t["health"] == "up" for t in api(url, "targets")["activeTargets"])


def _assert_targets_up_and_rules_read_series(url: str) -> None:
    targets = api(url, "targets")["activeTargets"]
    assert {t["labels"]["job"]: t["health"] for t in targets} == {
        "revisit-scheduler": "up",
        "revisit-journal": "up",
        "revisit-worker": "up",
    }
    rules = [r for g in api(url, "rules")["groups"] for r in g["rules"]]
    assert len(rules) == 11
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
        api(url, "query", query=rule["query"])  # valid as written
    # A rate or a derivative needs two samples of its series: on a loaded
    # machine the second scrape may come a few seconds after the panels' data.
    unread: list[str] = []

    def every_rule_reads_a_series() -> bool:
        nonlocal unread
        unread = []
        for rule in rules:
            kept = COMPARISON.sub(r"\1 bool", rule["query"])
            if not api(url, "query", query=kept)["result"]:
                unread.append(f"{rule['name']} reads no series: {kept}")
        return not unread

    deadline = time.time() + 60
    while not every_rule_reads_a_series() and time.time() < deadline:
        time.sleep(1)
    assert not unread, unread


def test_coverage_counts_each_listers_origins_by_what_is_known_of_their_visits(
    conn: DictConnection, ctx: Context
) -> None:
    from monitoring.coverage import refresh_coverage

    now = datetime.now(tz=UTC)
    lister_id = register_lister(conn, "test", "coverage", None)
    old = now - timedelta(days=10)
    rows = [
        (1, ListedOriginIn(url="https://f/visited", visit_type="git", last_update=old)),
        (2, ListedOriginIn(url="https://f/changed", visit_type="git", last_update=now)),
        (3, ListedOriginIn(url="https://f/new", visit_type="git", last_update=now)),
    ]
    record_listed_origins(conn, ctx, lister_id, rows, now)
    conn.execute("update listed_origins set first_seen = %s", (now - timedelta(days=2),))
    conn.execute(
        "update origin_visit_stats set last_successful = %s where url = any(%s)",
        (now - timedelta(days=1), ["https://f/visited", "https://f/changed"]),
    )
    (row,) = refresh_coverage(conn, now, active_window_s=86400, overdue_after_s=3600)
    assert row["lister"] == "test/coverage"
    assert (row["origins_known"], row["origins_enabled"], row["origins_never_visited"]) == (3, 3, 1)
    assert row["origins_with_pending_changes"] == 1  # changed after its last visit
    assert row["origins_active"] == 2  # updated within the day
    assert row["origins_never_visited_overdue"] == 1  # listed 2 days ago
    stored = conn.execute("select count(*) as n from scheduler_metrics").fetchone()
    assert stored is not None and stored["n"] == 1


def test_a_first_visit_applied_late_is_observed_once(conn: DictConnection, ctx: Context) -> None:
    from monitoring.coverage import FirstVisits

    now = datetime.now(tz=UTC)
    lister_id = register_lister(conn, "test", "late", None)
    rows = [(1, ListedOriginIn(url="https://f/late", visit_type="git"))]
    record_listed_origins(conn, ctx, lister_id, rows, now - timedelta(minutes=10))
    first = FirstVisits(now - timedelta(minutes=1), lookback_s=3600)
    assert first.observe(conn, now) == 0
    # Dated before the last look, applied after it (the journal was behind).
    conn.execute(
        "update origin_visit_stats set last_final_date = %s, eventful_visits = 1",
        (now - timedelta(seconds=30),),
    )
    assert first.observe(conn, now + timedelta(seconds=5)) == 1
    assert first.observe(conn, now + timedelta(seconds=10)) == 0
