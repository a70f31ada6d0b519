"""Recurrent lister runs on real PostgreSQL, Redis and Dramatiq worker processes."""

from __future__ import annotations

import random
import urllib.request
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
from app.rpc.codec import encode
from app.services.context import Context
from app.settings import Settings
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys
from tests.integration.helpers import cli, stats_by_url
from tests.processes import running, wait_for, with_constants

HOUR = timedelta(hours=1)


def runs(conn: DictConnection) -> list[dict[str, object]]:
    return conn.execute("select * from lister_runs order by id").fetchall()


def schedule(conn: DictConnection, path: Path, at: datetime) -> object:
    path.mkdir(parents=True, exist_ok=True)
    arguments = {"path": str(path)}
    return schedule_lister(
        conn, "gitdir", "forge", at, arguments=arguments, full_interval=HOUR, first_run=at
    )


def schedule_row(conn: DictConnection) -> dict[str, object] | None:
    return conn.execute("select * from lister_schedules").fetchone()


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
    (tmp_path / "missing").rmdir()  # the forge's directory went away after scheduling
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


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (["nope", "x"], "NAME: no lister named 'nope'"),
        (["gitdir", "x", "--every", "soon"], "--every: expected a positive duration"),
        (["gitdir", "x", "--every", "1s"], "--every: 0:00:01 is below the shortest, 0:01:00"),
        (
            ["gitdir", "x", "--every", "1h", "--incremental-every", "2h"],
            "--incremental-every: 2:00:00 is not shorter than --every (1:00:00)",
        ),
        (
            ["gitdir", "x", "--every", "1h", "--incremental-every", "1h"],
            "--incremental-every: 1:00:00 is not shorter than --every",
        ),
        (["gitdir", "x", "--arg", "path=/"], "--arg: gitdir: path: / is the filesystem root"),
        (["gitdir", "x", "--arg", "path=/no/such/dir"], "--arg: gitdir: path: /no/such/dir is not"),
        (
            ["gitdir", "x", "--arg", "path=/srv", "--arg", "max_detph=2"],
            "--arg: gitdir: max_detph: no such argument (known: path, visit_type, max_depth, "
            "page_size); did you mean 'max_depth'?",
        ),
    ],
)
def test_lister_schedule_command_refuses_bad_input_naming_it_and_writes_nothing(
    conn: DictConnection, options: list[str], refusal: str
) -> None:
    refused = cli("lister", "schedule", *options)
    assert refused.returncode == 2 and refusal in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert conn.execute("select count(*) as n from lister_schedules").fetchone() == {"n": 0}
    assert conn.execute("select count(*) as n from listers").fetchone() == {"n": 0}


def test_rerunning_lister_schedule_changes_only_what_is_given(
    conn: DictConnection, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    new = cli("lister", "schedule", "gitdir", "x", "--every", "6h", "--arg", f"path={tmp_path}/a")
    assert new.returncode == 0 and "scheduled" in new.stdout, new.stderr
    first = schedule_row(conn)
    assert first is not None and first["arguments"] == {"path": f"{tmp_path}/a"}
    assert first["full_interval"] == 6 * HOUR and first["incremental_interval"] is None
    changed = cli("lister", "schedule", "gitdir", "x", "--incremental-every", "1h")
    assert changed.returncode == 0 and "changed" in changed.stdout, changed.stderr
    row = schedule_row(conn)
    assert row is not None and row["arguments"] == {"path": f"{tmp_path}/a"}
    assert (row["full_interval"], row["incremental_interval"]) == (6 * HOUR, HOUR)
    assert row["next_full_run"] == first["next_full_run"]  # a run already planned stays
    # a shorter --every takes effect at once; --arg replaces the arguments
    moved = cli("lister", "schedule", "gitdir", "x", "--every", "2h", "--arg", f"path={tmp_path}/b")
    assert moved.returncode == 0, moved.stderr
    row = schedule_row(conn)
    assert row is not None and row["arguments"] == {"path": f"{tmp_path}/b"}
    assert row["full_interval"] == 2 * HOUR
    # the stored incremental interval (1h) is held against the new --every
    refused = cli("lister", "schedule", "gitdir", "x", "--every", "30m")
    assert refused.returncode == 2 and "--incremental-every: 1:00:00 is not" in refused.stderr
    none = cli("lister", "schedule", "gitdir", "x", "--every", "30m", "--incremental-every", "0")
    assert none.returncode == 0, none.stderr
    row = schedule_row(conn)
    assert row is not None and row["incremental_interval"] is None
    assert row["next_incremental_run"] is None and row["full_interval"] == HOUR / 2


def test_a_paused_schedule_sends_no_run_until_resumed(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    schedule(conn, tmp_path / "forge", datetime.now(tz=UTC) - HOUR)
    scheduler = ListerScheduler(settings)
    paused = cli("lister", "pause", "gitdir", "forge")
    assert paused.returncode == 0, paused.stderr
    assert scheduler.step(datetime.now(tz=UTC)) == []
    keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, LISTER_QUEUE)
    queue = redis.Redis.from_url(settings.redis_dsn())
    assert queue.hlen(keys.messages) == 0 and runs(conn) == []
    assert "- (paused)" in cli("lister", "schedules").stdout
    # changing a paused schedule keeps it paused
    changed = cli("lister", "schedule", "gitdir", "forge", "--every", "2h")
    assert changed.returncode == 0 and "paused" in changed.stdout
    assert scheduler.step(datetime.now(tz=UTC)) == []
    resumed = cli("lister", "resume", "gitdir", "forge")
    assert resumed.returncode == 0, resumed.stderr
    (sent,) = scheduler.step(datetime.now(tz=UTC))  # what fell due meanwhile, at once
    assert sent.full and queue.hlen(keys.messages) == 1


def test_pause_resume_and_unschedule_of_an_unscheduled_lister_say_which_are_scheduled(
    conn: DictConnection, tmp_path: Path
) -> None:
    schedule(conn, tmp_path / "forge", datetime.now(tz=UTC))
    for command in ("pause", "resume", "unschedule"):
        missing = cli("lister", command, "gitdir", "nope")
        assert missing.returncode == 1
        assert "gitdir/nope has no schedule (scheduled: gitdir/forge)" in missing.stderr
    assert schedule_row(conn) is not None


def test_unschedule_removes_the_schedule_keeps_its_runs_and_its_run_out_is_not_run(
    conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    start = datetime.now(tz=UTC)
    make_repo(tmp_path / "forge" / "r0")
    schedule(conn, tmp_path / "forge", start)
    (done,) = claim_due_runs(conn, start, HOUR)
    assert execute_run(conn, ctx, done.run_id, lambda: start, random.Random()) is not None
    (out,) = claim_due_runs(conn, start + 2 * HOUR, HOUR)
    gone = cli("lister", "unschedule", "gitdir", "forge")
    assert gone.returncode == 0, gone.stderr
    assert schedule_row(conn) is None
    assert execute_run(conn, ctx, out.run_id, lambda: start, random.Random()) is None
    assert [(r["status"], r["error"]) for r in runs(conn)] == [
        ("succeeded", None),
        ("lost", "unscheduled"),
    ]
    assert claim_due_runs(conn, start + 9 * HOUR, HOUR) == []
    history = cli("lister", "runs", "gitdir", "forge")
    assert history.returncode == 0 and "unscheduled" in history.stdout
    assert "gitdir/forge" not in cli("lister", "schedules").stdout


def test_lister_schedules_and_runs_show_each_runs_outcome_and_the_next_due_time(
    conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    start = datetime(2026, 7, 1, tzinfo=UTC)
    schedule(conn, tmp_path / "missing", start)
    (tmp_path / "missing").rmdir()
    now = start
    for _ in range(4):
        (due,) = claim_due_runs(conn, now, 6 * HOUR)
        outcome = execute_run(conn, ctx, due.run_id, lambda: now, random.Random(1))  # noqa: B023
        assert outcome is not None and outcome.next_schedule is not None
        now = outcome.next_schedule.next_full_run
    listing = cli("lister", "schedules", "--runs", "2")
    assert listing.returncode == 0, listing.stderr
    lines = [line for line in listing.stdout.splitlines() if "failed" in line]
    assert len(lines) == 2 and "ValueError: path:" in lines[0]
    assert "4 failures in a row" in listing.stdout and now.strftime("%H:%M:%S") in listing.stdout
    history = cli("lister", "runs", "gitdir", "--limit", "3")
    assert history.returncode == 0, history.stderr
    ids = [r["id"] for r in runs(conn)]
    shown = [line for line in history.stdout.splitlines() if " failed " in line]
    assert len(shown) == 3 and f" {ids[-1]} " in shown[0] and f" {ids[1]} " in shown[-1]
    assert cli("lister", "runs", "nope").returncode == 1


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


def _served(port: int) -> str:
    """What a process serves on its /metrics port ("" while it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


def test_the_rpc_server_and_the_lister_processes_each_serve_the_lister_metrics_they_update(
    conn: DictConnection, tmp_path: Path
) -> None:
    make_repo(tmp_path / "forge" / "r")
    schedule(conn, tmp_path / "forge", datetime.now(tz=UTC))
    ports = {name: free_port() for name in ("rpc", "lister_scheduler", "lister_worker")}
    rpc_port = free_port()
    commands = {
        "rpc": ["env", f"REVISIT_RPC_PORT={rpc_port}", "revisit", "rpc"],
        "lister_scheduler": ["revisit", "lister", "scheduler"],
        "lister_worker": ["revisit", "lister", "worker"],
    }
    commands = {
        name: ["env", f"REVISIT_METRICS_PORT={ports[name]}", *argv]
        for name, argv in commands.items()
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    constants = {"actors.lister_scheduler.LISTER_POLL_INTERVAL_S": 0.2}
    with running(commands, with_constants(constants), logs):
        wait_for(lambda: runs(conn) and runs(conn)[0]["status"] == "succeeded", 60, "the run", logs)

        def rpc_call() -> bool:
            request = urllib.request.Request(
                f"http://127.0.0.1:{rpc_port}/listers/get",
                data=encode({}),
                headers={"content-type": "application/x-msgpack"},
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        wait_for(rpc_call, 30, "the RPC server to answer", logs)
        expected = {
            "rpc": [
                'revisit_rpc_requests_total{endpoint="listers/get",status="200"} 1.0',
                'revisit_rpc_request_seconds_count{endpoint="listers/get"} 1.0',
            ],
            "lister_scheduler": ['revisit_lister_runs_sent_total{kind="full"} 1.0'],
            "lister_worker": [
                'revisit_lister_runs_total{lister="gitdir/forge",outcome="succeeded"} 1.0',
                'revisit_lister_origins_listed_total{lister="gitdir/forge"} 1.0',
            ],
        }
        missing: dict[str, list[str]] = {}

        def all_served() -> bool:
            served = {name: _served(port) for name, port in ports.items()}
            missing.clear()
            for name, lines in expected.items():
                missing[name] = [line for line in lines if line not in served[name]]
            return not any(missing.values())

        try:
            wait_for(all_served, 30, "each process to serve its lister metrics", logs)
        except AssertionError as exc:
            raise AssertionError(f"not served: {missing}") from exc
