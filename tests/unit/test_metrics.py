import json
import os
import tempfile
from pathlib import Path

import pytest

from app.domain.latency import wait_s
from app.settings import Settings
from monitoring.dashboard import JSON_PATH, RATE, panels
from monitoring.dramatiq_metrics import MULTIPROC_ENV, worker_metrics_env
from monitoring.lanes import lane_of
from monitoring.render import legend

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("queue", "lane"),
    [
        ("visit.git.priority", "priority"),
        ("visit.git.express", "express"),
        ("first.visit.git", "first_visits"),
        ("revisit.api", "revisit.api"),
    ],
)
def test_lane_is_named_from_the_queue(queue: str, lane: str) -> None:
    assert lane_of(queue, "git") == lane


def test_wait_is_depth_over_drain_rate_and_unknown_before_any_drain() -> None:
    assert wait_s(0, None) == 0.0
    assert wait_s(10, None) is None
    assert wait_s(10, 2.0) == 5.0


def test_every_panel_says_what_it_shows_and_under_which_row() -> None:
    read = panels()
    assert read and all(p.row and p.title and p.description and p.unit for p in read)
    assert all(p.targets and all(t.expr and t.legend for t in p.targets) for p in read)
    assert len({p.title for p in read}) == len(read)


def test_every_panel_reads_the_datasource_variable() -> None:
    board = json.loads(JSON_PATH.read_text())
    assert board["templating"]["list"][0]["type"] == "datasource"
    graphs = [p for p in board["panels"] if p["type"] == "timeseries"]
    assert len(graphs) == len(panels())
    for panel in graphs:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_rates_use_grafanas_rate_interval() -> None:
    exprs = [t.expr for p in panels() for t in p.targets]
    assert all(RATE in e for e in exprs if "rate(" in e or "increase(" in e)


def test_legend_fills_label_placeholders() -> None:
    assert legend("{{lister}} {{visit_type}} known", {"lister": "a/b", "visit_type": "git"}) == (
        "a/b git known"
    )


def test_worker_metrics_env_empties_the_multiprocess_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / "revisit-metrics-9999" / "counter_123.db"
    stale.parent.mkdir()
    stale.write_bytes(b"old run")
    env = worker_metrics_env(Settings(metrics_port=9999))
    assert env[MULTIPROC_ENV] == str(stale.parent) == env["dramatiq_prom_db"]
    assert env["dramatiq_prom_port"] == "9999" and env["dramatiq_prom_host"] == "127.0.0.1"
    assert not stale.exists()


def test_no_worker_metrics_port_means_no_exporter() -> None:
    assert worker_metrics_env(Settings(metrics_port=0)) == {}


def test_every_metric_belongs_to_exactly_one_process() -> None:
    from prometheus_client.metrics import MetricWrapperBase

    from monitoring import metrics

    values = [*vars(metrics).values(), *metrics.COVERAGE_GAUGES.values()]
    defined = {id(v) for v in values if isinstance(v, MetricWrapperBase)}
    owners = [
        metrics.JOURNAL_OWNED,
        metrics.SCHEDULER_OWNED,
        metrics.WORKER_OWNED,
        metrics.RPC_OWNED,
        metrics.LISTER_SCHEDULER_OWNED,
    ]
    owned = [id(m) for group in owners for m in group]
    assert len(owned) == len(set(owned)), "a metric is owned by two processes"
    assert set(owned) == defined, "add a new metric to the *_OWNED tuple of its process"


def test_the_scheduler_serves_none_of_the_journal_metrics() -> None:
    from prometheus_client import generate_latest

    from monitoring.metrics import SCHEDULER_OWNED, owned_registry

    served = generate_latest(owned_registry(SCHEDULER_OWNED)).decode()
    assert "revisit_coverage_refresh_seconds" in served
    assert "process_cpu_seconds_total" in served
    assert "revisit_journal_" not in served
    assert "revisit_worker_" not in served


def test_the_delayed_messages_gauge_counts_a_message_delayed_twice_once() -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, Gauge

    from monitoring.dramatiq_metrics import WorkerMetrics

    middleware = WorkerMetrics()
    registry = CollectorRegistry()
    gauge = Gauge("delayed", "test", ["queue_name", "actor_name"], registry=registry)
    middleware.inprogress_delayed_messages = gauge
    middleware.inprogress_messages = Gauge("inprogress", "test", ["q", "a"], registry=registry)
    middleware.message_start_times = {}

    def message(message_id: str) -> SimpleNamespace:
        return SimpleNamespace(queue_name="q", actor_name="visit", message_id=message_id)

    middleware.before_delay_message(None, message("a"))
    middleware.before_delay_message(None, message("a"))  # delayed again (a retry)
    middleware.before_process_message(None, message("a"))
    middleware.before_process_message(None, message("b"))  # never delayed here
    assert registry.get_sample_value("delayed", {"queue_name": "q", "actor_name": "visit"}) == 0


def test_a_dramatiq_process_serves_none_of_the_schedulers_or_journals_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    from prometheus_client import generate_latest

    from monitoring.dramatiq_metrics import WorkerMetrics, serve_worker_metrics, worker_registry

    # A worker process in multiprocess mode: importing the metrics writes a
    # file for every unlabelled metric, the scheduler's and journal's too.
    code = "from monitoring.metrics import VISITS; VISITS.labels('git', 'full').inc()"
    env = {"PATH": os.environ["PATH"], MULTIPROC_ENV: str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT)
    assert any(tmp_path.glob("*.db"))
    served = generate_latest(worker_registry(tmp_path)).decode()
    assert 'revisit_worker_visits_total{status="full",visit_type="git"} 1.0' in served
    assert "revisit_journal_" not in served
    assert "revisit_coverage_refresh_seconds" not in served
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    assert WorkerMetrics().forks == [serve_worker_metrics]


def test_the_journal_serves_its_dead_letter_series_from_the_start_so_a_rate_sees_the_first() -> (
    None
):
    from prometheus_client import REGISTRY

    from monitoring.process import serve_journal

    serve_journal(Settings(metrics_port=0), ["git"])
    for reason in ("value", "database"):
        sample = REGISTRY.get_sample_value("revisit_journal_dead_letters_total", {"reason": reason})
        assert sample is not None
