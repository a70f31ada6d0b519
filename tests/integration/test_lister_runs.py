"""Recurrent lister runs on real PostgreSQL, Redis and Dramatiq worker processes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from actors.lister_scheduler import ListerScheduler
from app.db.connection import DictConnection
from app.devtools.demo import make_repo
from app.devtools.embedded import free_port
from app.domain.queue_names import LISTER_QUEUE
from app.listers.runs import claim_due_runs, execute_run, schedule_lister
from app.services.context import Context
from app.settings import Settings
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys
from tests.integration.helpers import cli, stats_by_url
from tests.processes import running, wait_for, with_constants

HOUR = timedelta(hours=1)


def runs(conn: DictConnection) -> list[dict[str, object]]:
    return conn.execute("select * from lister_runs order by id").fetchall()


def schedule(conn: DictConnection, path: Path, at: datetime) -> object:
    return schedule_lister(conn, "gitdir", "forge", {"path": str(path)}, HOUR, None, at)


def test_a_scheduled_run_is_executed_by_a_worker_and_its_origins_are_visited(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    urls = [make_repo(tmp_path / "forge" / f"r{i}") for i in range(3)]
    schedule(conn, tmp_path / "forge", datetime.now(tz=UTC))
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = {
        "lister_worker": ["revisit", "lister", "worker"],
        "scheduler": ["revisit", "scheduler"],
        "worker": ["revisit", "worker", "--processes", "1", "--threads", "2"],
        "journal": ["revisit", "journal"],
    }
    with running(processes, with_constants({"actors.scheduler.POLL_INTERVAL_S": 0.2}), logs):
        sent = ListerScheduler(settings).step(datetime.now(tz=UTC))
        assert len(sent) == 1 and sent[0].full
        wait_for(lambda: runs(conn)[0]["status"] == "succeeded", 60, "the lister run", logs)
        wait_for(
            lambda: all(r["last_visit_status"] == "full" for r in stats_by_url(conn).values()),
            90,
            "the listed repositories to be visited",
            logs,
        )
    assert set(stats_by_url(conn)) == set(urls)
    run = runs(conn)[0]
    assert run["origins_listed"] == 3 and run["error"] is None
    state = conn.execute("select current_state from listers").fetchone()
    assert state is not None and "last_update" in state["current_state"]
    # not due again before its interval
    assert ListerScheduler(settings).step(datetime.now(tz=UTC)) == []
    listing = cli("lister", "list")
    assert "gitdir/forge" in listing.stdout and "succeeded" in listing.stdout


def test_a_failing_lister_backs_off_and_says_why(
    conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    start = datetime(2026, 7, 1, tzinfo=UTC)
    schedule(conn, tmp_path / "missing", start)
    rng = random.Random(3)
    waits = []
    now = start
    for _ in range(3):
        (due,) = claim_due_runs(conn, now, 6 * HOUR)
        outcome = execute_run(conn, ctx, due.run_id, lambda: now, rng)  # noqa: B023
        assert outcome is not None and outcome.next_schedule is not None
        assert (
            not outcome.succeeded
            and outcome.error
            and outcome.error.startswith("ValueError: path:")
        )
        assert claim_due_runs(conn, now, 6 * HOUR) == []  # not due before the retry wait
        waits.append(outcome.next_schedule.next_full_run - now)
        now = outcome.next_schedule.next_full_run
    minute = timedelta(minutes=1)
    for wait, expected in zip(waits, [minute, 2 * minute, 4 * minute], strict=True):
        assert expected * 0.9 <= wait < expected * 1.1
    assert [r["status"] for r in runs(conn)] == ["failed"] * 3
    row = conn.execute("select failures_in_a_row from lister_schedules").fetchone()
    assert row == {"failures_in_a_row": 3}
    listing = cli("lister", "list")
    assert "failed: ValueError: path:" in listing.stdout


def test_a_run_no_worker_finished_is_declared_lost_and_sent_again(
    conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    start = datetime.now(tz=UTC)  # the forge's commits are dated now
    make_repo(tmp_path / "forge" / "r0")
    schedule(conn, tmp_path / "forge", start)
    (first,) = claim_due_runs(conn, start, HOUR)
    assert claim_due_runs(conn, start + HOUR / 2, HOUR) == []  # still out
    (second,) = claim_due_runs(conn, start + 2 * HOUR, HOUR)
    assert execute_run(conn, ctx, first.run_id, lambda: start, random.Random()) is None
    outcome = execute_run(conn, ctx, second.run_id, lambda: start, random.Random())
    assert outcome is not None and outcome.succeeded and outcome.origins_listed == 1
    assert [r["status"] for r in runs(conn)] == ["lost", "succeeded"]


def test_lister_schedule_command_refuses_bad_input_naming_it(conn: DictConnection) -> None:
    unknown = cli("lister", "schedule", "nope", "x")
    assert unknown.returncode == 2 and "NAME: no lister named 'nope'" in unknown.stderr
    bad = cli("lister", "schedule", "gitdir", "x", "--every", "soon")
    assert bad.returncode == 2 and "--every: expected a positive duration" in bad.stderr
    assert conn.execute("select count(*) as n from lister_schedules").fetchone() == {"n": 0}
    good = cli("lister", "schedule", "gitdir", "x", "--every", "6h", "--arg", "path=/srv/git")
    assert good.returncode == 0, good.stderr
    row = conn.execute("select arguments, full_interval from lister_schedules").fetchone()
    assert row == {"arguments": {"path": "/srv/git"}, "full_interval": 6 * HOUR}


def test_a_run_that_cannot_be_sent_is_given_back_and_sent_by_a_later_step(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    schedule(conn, tmp_path, datetime.now(tz=UTC) - HOUR)
    away = settings.model_copy(
        update={"redis_url": SecretStr(f"redis://127.0.0.1:{free_port()}/0")}
    )
    with pytest.raises(redis.exceptions.ConnectionError):
        ListerScheduler(away).step(datetime.now(tz=UTC))
    assert [r["status"] for r in runs(conn)] == ["lost"]
    assert str(runs(conn)[0]["error"]).startswith("not sent:")
    (sent,) = ListerScheduler(settings).step(datetime.now(tz=UTC))
    keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, LISTER_QUEUE)
    queued = redis.Redis.from_url(settings.redis_dsn()).hlen(keys.messages)
    assert sent.run_id == runs(conn)[1]["id"] and queued == 1
