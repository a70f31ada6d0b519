"""A visit type is tuned in its visit_types row, without an environment change:
its time limit, retries and retry delay reach the messages the scheduler sends
and the worker that runs them; unset, the columns' defaults (4h, 3 retries, 30s)
stand."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from actors.scheduler import SchedulerLoop
from app.db.connection import DictConnection
from app.services.context import Context
from app.settings import Settings
from queues.keys import DramatiqQueueKeys
from tests.integration.helpers import cli, list_origins, run_visits, stats_by_url
from tests.integration.test_lanes import SIMULATED, finished, list_simulated, serve

#: Simulated origins whose first visits fail transiently, once and twice.
FLAKY: dict[str, dict[str, object]] = {
    "sim://flaky.example/once": {"transient_failures": 1},
    "sim://flaky.example/twice": {"transient_failures": 2},
}


def sent_options(loop: SchedulerLoop, queue: str) -> list[dict[str, object]]:
    key = DramatiqQueueKeys(loop.broker.namespace, queue).messages
    return [json.loads(m)["options"] for m in loop.broker.client.hvals(key)]


def test_the_scheduler_sends_the_visit_types_time_limit_and_retries(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    tuned = cli("visit-type", "set", "git", "--time-limit", "2h", "--retries", "1")
    assert tuned.returncode == 0, tuned.stderr
    assert cli("visit-type", "set", "git", "--retry-delay", "10s").returncode == 0
    conn.execute("update visit_types set max_queue_length = 2 where name = 'git'")
    list_origins(conn, ctx, [f"https://tuned.example/{i}" for i in range(4)])
    serve(ctx, "visit.git.slow")  # the slow lane takes what the express lane cannot
    loop = SchedulerLoop(settings)
    loop.step(datetime.now(tz=UTC))

    express = sent_options(loop, "visit.git.express")
    slow = sent_options(loop, "visit.git.slow")
    assert len(express) == len(slow) == 2
    tuning = {"visit_time_limit": 7_200_000, "max_retries": 1, "min_backoff": 10_000}
    limit_ms = int(settings.express_time_limit_s * 1000)
    assert all(o["time_limit"] == limit_ms and tuning.items() <= o.items() for o in express)
    assert all(o["time_limit"] == 7_200_000 and tuning.items() <= o.items() for o in slow)
    listed = cli("visit-type", "list").stdout
    assert "2h" in listed and "10s" in listed
    hg = next(line for line in listed.splitlines() if "│ hg" in line)
    assert "4h" in hg and "30s" in hg  # hg keeps the columns' defaults


def test_the_worker_retries_as_often_and_as_soon_as_the_visit_type_says(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    list_simulated(conn, ctx, FLAKY)
    # The defaults would retry 3 times after 30 s: the row says once, after 0.2 s.
    tuned = cli("visit-type", "set", "simulated", "--retries", "1", "--retry-delay", "0.2s")
    assert tuned.returncode == 0, tuned.stderr
    run_visits(tmp_path, SIMULATED, lambda: finished(conn, list(FLAKY)), "both visits", 25)
    stats = stats_by_url(conn)
    assert stats["sim://flaky.example/once"]["last_visit_status"] == "full"
    assert stats["sim://flaky.example/twice"]["last_visit_status"] == "failed"


def test_schedule_now_sends_with_the_visit_types_tuning_too(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    assert cli("visit-type", "set", "git", "--time-limit", "3h", "--retries", "0").returncode == 0
    list_origins(conn, ctx, [f"https://now.example/{i}" for i in range(2)])
    sent = cli("schedule", "git", "-n", "2")
    assert sent.returncode == 0, sent.stderr
    loop = SchedulerLoop(settings)
    options = sent_options(loop, "visit.git.express") + sent_options(loop, "visit.git.slow")
    assert len(options) == 2
    assert all(o["visit_time_limit"] == 10_800_000 and o["max_retries"] == 0 for o in options)


def test_a_visit_type_names_its_loader_and_a_bad_loader_name_is_refused(
    settings: Settings, conn: DictConnection
) -> None:
    assert "git (not installed)" not in cli("visit-type", "list").stdout
    switched = cli("visit-type", "set", "git", "--loader", "swh-git")
    assert switched.returncode == 0, switched.stderr
    added = cli("visit-type", "add", "bzr", "--loader", "swh-bzr")
    assert "no loader swh-bzr is installed" in added.stdout
    refused = cli("visit-type", "set", "git", "--loader", "Swh Git")
    assert refused.returncode == 2 and "loader" in refused.stderr
    listed = cli("visit-type", "list").stdout
    assert "swh-git" in next(line for line in listed.splitlines() if "│ git" in line)
    assert "swh-bzr (not" in next(line for line in listed.splitlines() if "│ bzr" in line)
    rows = conn.execute("select name, loader from visit_types where name in ('git', 'bzr')")
    assert {r["name"]: r["loader"] for r in rows} == {"git": "swh-git", "bzr": "swh-bzr"}
