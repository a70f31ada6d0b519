"""Express and slow lanes with real Redis, Dramatiq worker processes and the
journal: seed 003's example, a SIGKILLed worker, a SIGTERMed worker, an
express pool alone, for the scheduler and ``revisit schedule``."""

import itertools
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from actors.scheduler import SchedulerLoop
from app.db.connection import DictConnection
from app.services.context import Context
from app.settings import Settings
from queues.keys import DramatiqQueueKeys, queue_workers
from queues.workers import capacities
from tests.integration.helpers import cli, list_origins, run_visits, stats_by_url
from tests.processes import running, wait_for, with_constants

FAST_POLL = {"actors.scheduler.POLL_INTERVAL_S": 0.2}
SIMULATED = with_constants(FAST_POLL, {"REVISIT_WORKER_VISIT_TYPES_ALLOW": '["simulated"]'})


def serve(ctx: Context, queue: str) -> None:
    """Register a worker process with one thread on ``queue``, as a worker pool does."""
    ctx.redis.hset(queue_workers(ctx.settings.redis_namespace, queue), "1", f"1|{time.time()}")


def list_simulated(
    conn: DictConnection, ctx: Context, origins: dict[str, dict[str, object]]
) -> None:
    from datetime import UTC, datetime

    from app.db.listings import register_lister
    from app.inputs.listing import ListedOriginIn
    from app.services.listing import record_listed_origins

    conn.execute("insert into visit_types (name, max_queue_length) values ('simulated', 1)")
    lister = register_lister(conn, "sim", "lanes", None)
    rows = [
        (i + 1, ListedOriginIn(url=url, visit_type="simulated", extra_loader_arguments=args))
        for i, (url, args) in enumerate(origins.items())
    ]
    record_listed_origins(conn, ctx, lister, rows, datetime.now(tz=UTC))


def finished(conn: DictConnection, urls: list[str]) -> bool:
    stats = stats_by_url(conn)
    return all(stats.get(u, {}).get("last_final_date") for u in urls)


def test_seed_003_example_fast_jobs_finish_before_slow_ones(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    jobs = {
        "sim://fast1": {"duration_s": 0.2},
        "sim://slow1": {"duration_s": 5.0},
        "sim://slow2": {"duration_s": 5.0},
        "sim://fast2": {"duration_s": 0.2},
    }
    list_simulated(conn, ctx, jobs)
    conn.execute("update visit_types set time_limit = interval '30 s' where name = 'simulated'")
    env = {**SIMULATED, "REVISIT_EXPRESS_TIME_LIMIT_S": "2"}
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "scheduler": ["revisit", "scheduler"],
        "express": ["revisit", "worker", "--lane", "express", "--threads", "1"],
        "slow": ["revisit", "worker", "--lane", "slow", "--threads", "1"],
        "journal": ["revisit", "journal"],
    }
    with running(procs, env, logs):
        wait_for(lambda: finished(conn, list(jobs)), 60, "all four jobs", logs)
        [(threads, durations)] = capacities(ctx.redis, "revisit", ["visit.simulated.slow"]).values()
        assert threads == 1
        assert sorted(durations)[-1] >= 5.0
    done = {u: r["last_final_date"] for u, r in stats_by_url(conn).items()}
    assert max(done["sim://fast1"], done["sim://fast2"]) < min(
        done["sim://slow1"], done["sim://slow2"]
    )
    express_log = (logs / "express.log").read_text()
    slow_log = (logs / "slow.log").read_text()
    # One slow job was tried in the express lane, stopped, and retried once in the slow lane.
    assert express_log.count("outlasted the express lane") == 1
    assert "visited sim://slow1 in the slow lane: full" in slow_log
    assert "visited sim://slow2 in the slow lane: full" in slow_log
    assert all(r["last_visit_status"] == "full" for r in stats_by_url(conn).values())


def _worker_pids(proc_pid: int) -> list[int]:
    """Dramatiq's worker processes: the children of the process we started."""
    out = os.popen(f"pgrep -P {proc_pid}").read().split()
    return [int(p) for p in out]


def test_visit_of_a_sigkilled_worker_is_completed_by_another_within_the_bound(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    list_simulated(conn, ctx, {"sim://long": {"duration_s": 3.0}})
    env = with_constants(
        {**FAST_POLL, "queues.dramatiq_broker.HEARTBEAT_TIMEOUT_MS": 5000}, SIMULATED
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    with running(
        {
            "scheduler": ["revisit", "scheduler"],
            "journal": ["revisit", "journal"],
            "doomed": ["revisit", "worker", "--threads", "1"],
        },
        env,
        logs,
    ) as procs:
        wait_for(lambda: "created" in _statuses(conn), 30, "the visit to start", logs)
        for pid in _worker_pids(procs["doomed"].pid):
            os.kill(pid, signal.SIGKILL)
        os.killpg(procs["doomed"].pid, signal.SIGKILL)
        killed_at = time.monotonic()
        with running({"rescuer": ["revisit", "worker", "--threads", "1"]}, env, logs):
            wait_for(
                lambda: finished(conn, ["sim://long"]), 60, "another worker to finish it", logs
            )
        took = time.monotonic() - killed_at
    print(f"visit of the killed worker completed {took:.1f}s after SIGKILL")
    assert took < 30
    assert stats_by_url(conn)["sim://long"]["last_visit_status"] == "full"


def _statuses(conn: DictConnection) -> set[str]:
    row = stats_by_url(conn).get("sim://long") or {}
    return {"created"} if row.get("last_visit") else set()


def test_sigterm_lets_the_running_visit_finish(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    list_simulated(conn, ctx, {"sim://steady": {"duration_s": 3.0}})
    env = SIMULATED
    logs = tmp_path / "logs"
    logs.mkdir()
    with running(
        {"scheduler": ["revisit", "scheduler"], "journal": ["revisit", "journal"]}, env, logs
    ):
        with running({"worker": ["revisit", "worker", "--threads", "1"]}, env, logs) as procs:
            wait_for(
                lambda: bool((stats_by_url(conn).get("sim://steady") or {}).get("last_visit")),
                30,
                "the visit to start",
                logs,
            )
            # As a supervisor does: SIGTERM to the main process, which stops its
            # worker processes gracefully (a second signal would kill them).
            os.kill(procs["worker"].pid, signal.SIGTERM)
            assert procs["worker"].wait(30) == 0
        wait_for(lambda: finished(conn, ["sim://steady"]), 30, "the final status", logs)
    assert stats_by_url(conn)["sim://steady"]["last_visit_status"] == "full"


def test_worker_pool_refuses_to_start_with_no_visit_type_to_serve(settings: Settings) -> None:
    import subprocess
    import sys

    env = {**os.environ, "REVISIT_WORKER_VISIT_TYPES_DENY": '["git"]'}
    proc = subprocess.run(
        [sys.executable, "-m", "app", "worker"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no visit type to serve" in proc.stderr


def test_a_hoster_never_has_more_visits_running_than_its_limit(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    jobs = {f"sim://busy.example/{i}": {"duration_s": 1.0} for i in range(3)}
    jobs["sim://free.example/x"] = {"duration_s": 1.0}
    list_simulated(conn, ctx, jobs)
    conn.execute(
        "update visit_types set max_queue_length = 10, retry_delay = interval '0.2 s' "
        "where name = 'simulated'"
    )
    env = {**SIMULATED, "REVISIT_HOSTER_LIMITS": '{"busy.example": 1}'}
    logs = run_visits(tmp_path, env, lambda: finished(conn, list(jobs)), "all visits")
    stats = stats_by_url(conn)
    busy = sorted(stats[u]["last_final_date"] for u in jobs if "busy" in u)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(busy)]
    # one at a time: each 1 s visit ends at least ~1 s after the previous one
    assert all(gap >= 0.9 for gap in gaps), gaps
    assert "busy.example has 1 visits running" in (logs / "worker.log").read_text()


def test_an_express_pool_alone_gets_the_whole_batch_and_the_unread_slow_lane_none(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    conn.execute("update visit_types set max_queue_length = 2 where name = 'git'")
    list_origins(conn, ctx, [f"https://lanes.example/{i}" for i in range(6)])  # never visited
    serve(ctx, "visit.git.express")
    loop = SchedulerLoop(settings)
    now = datetime.now(tz=UTC)

    def queued(lane: str) -> int:
        keys = DramatiqQueueKeys(loop.broker.namespace, f"visit.git.{lane}")
        return int(loop.broker.client.hlen(keys.messages))

    loop.step(now)
    assert (queued("express"), queued("slow")) == (2, 0)
    assert ctx.mirror.sizes("git")["inflight"] == 2  # the others wait in their pool
    serve(ctx, "visit.git.slow")
    loop.step(now + timedelta(seconds=1))
    assert (queued("express"), queued("slow")) == (2, 2)


def test_schedule_sends_predicted_slow_visits_to_the_slow_lane_only_while_a_worker_serves_it(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [f"https://cli-lanes.example/{i}" for i in range(4)])
    slow_s = 10 * settings.express_time_limit_s
    conn.execute("update origin_visit_stats set last_duration_s = %s", (slow_s,))

    def queued(lane: str) -> int:
        keys = DramatiqQueueKeys("dramatiq", f"visit.git.{lane}")
        return int(ctx.redis.hlen(keys.messages))

    unserved = cli("schedule", "git", "-n", "2")
    assert unserved.returncode == 0, unserved.stderr
    assert (queued("express"), queued("slow")) == (2, 0)
    serve(ctx, "visit.git.slow")
    served = cli("schedule", "git", "-n", "2")
    assert served.returncode == 0, served.stderr
    assert (queued("express"), queued("slow")) == (2, 2)
