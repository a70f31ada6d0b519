"""A worker or the API process killed (kill -9) in the middle of its work, on real
servers and processes: the processes started again finish everything, and
nothing sent to them is lost or done twice over."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
import redis

from actors.broker import make_broker
from app.client import RevisitClient
from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.domain.queue_names import lane_queue
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.scheduling import VisitOrder
from app.settings import Settings
from queues.dramatiq_broker import enqueue_many, visit_message
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys
from tests.integration.helpers import free_port, list_origins, stats_by_url
from tests.processes import BIN, running, wait_for, with_constants

VISIT_TYPE = "simulated"
#: Long enough to be killed in the middle of a visit.
VISIT_S = 3.0
#: Dramatiq gives a dead worker's messages back after its heartbeat timeout,
#: at a maintenance pass: both made short and certain here.
DRAMATIQ_CONSTANTS = {
    "queues.dramatiq_broker.HEARTBEAT_TIMEOUT_MS": 2000,
    "queues.dramatiq_broker.MAINTENANCE_CHANCE": 1_000_000,
}
DRAMATIQ_FAST = with_constants(DRAMATIQ_CONSTANTS)
FAST = with_constants(
    {**DRAMATIQ_CONSTANTS, "actors.scheduler.POLL_INTERVAL_S": 0.2},
    {"REVISIT_WORKER_VISIT_TYPES_ALLOW": f'["{VISIT_TYPE}"]'},
)
WORKER = ["revisit", "worker", "--processes", "1", "--threads", "4"]


def kill(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the process and its children (Dramatiq forks)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def in_progress(settings: Settings) -> int:
    """Dramatiq messages a worker has taken and not yet acknowledged."""
    client = redis.Redis.from_url(settings.redis_dsn())
    acks = client.scan_iter(match=DramatiqQueueKeys(DRAMATIQ_NAMESPACE, "*").acks("*"))
    return sum(int(client.scard(key)) for key in acks)


def final_visits(conn: DictConnection) -> dict[str, tuple[object, object]]:
    rows = conn.execute(
        "select url, last_visit_status::text as status, last_visit_number as visit"
        " from origin_visit_stats where visit_type = %s",
        (VISIT_TYPE,),
    ).fetchall()
    return {str(r["url"]): (r["status"], r["visit"]) for r in rows}


def list_simulated_origins(conn: DictConnection, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Six origins of VISIT_S visits listed, the FAST set-up in the environment."""
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    ctx = Context.from_settings(Settings())
    conn.execute(
        "insert into visit_types (name, max_queue_length) values (%s, 100) on conflict do nothing",
        (VISIT_TYPE,),
    )
    lister = register_lister(conn, "faults", "forge", None)
    urls = [f"sim://faults/{i}" for i in range(6)]
    origins = [
        (
            i + 1,
            ListedOriginIn(
                url=url, visit_type=VISIT_TYPE, extra_loader_arguments={"duration_s": VISIT_S}
            ),
        )
        for i, url in enumerate(urls)
    ]
    record_listed_origins(conn, ctx, lister, origins, datetime.now(tz=UTC))
    return urls


def test_a_worker_killed_in_the_middle_of_visits_loses_none_of_them(
    settings: Settings, conn: DictConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = list_simulated_origins(conn, monkeypatch)
    settings = Settings()
    logs = tmp_path / "logs"
    logs.mkdir()
    services = {"scheduler": ["revisit", "scheduler"], "journal": ["revisit", "journal"]}
    with running(services, {}, logs):
        with running({"worker": WORKER}, {}, logs) as first:
            wait_for(lambda: in_progress(settings) >= 4, 60, "four visits under way", logs)
            kill(first["worker"])
        with running({"worker_again": WORKER}, {}, logs):
            wait_for(
                lambda: all(status == "full" for status, _ in final_visits(conn).values()),
                120,
                "every origin visited after the kill",
                logs,
            )
    visits = final_visits(conn)
    assert sorted(visits) == urls
    assert "Traceback" not in (logs / "scheduler.log").read_text()


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no one reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def metrics_served(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def test_a_worker_whose_main_process_is_killed_leaves_no_child_and_its_port_free(
    settings: Settings, conn: DictConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_simulated_origins(conn, monkeypatch)
    settings = Settings()
    port = free_port()
    metrics = {"REVISIT_METRICS_PORT": str(port)}
    logs = tmp_path / "logs"
    logs.mkdir()
    services = {"scheduler": ["revisit", "scheduler"], "journal": ["revisit", "journal"]}
    with running(services, {}, logs):
        with running({"worker": WORKER}, metrics, logs) as first:
            wait_for(lambda: in_progress(settings) >= 4, 60, "four visits under way", logs)
            main = first["worker"].pid
            pool = children(main)  # the worker process and the metrics exporter, at least
            assert len(pool) >= 2
            os.kill(main, signal.SIGKILL)  # the main process alone
            first["worker"].wait(10)
            wait_for(
                lambda: not any(alive(pid) for pid in pool), 15, "the pool's processes gone", logs
            )
        with running({"worker_again": WORKER}, metrics, logs):
            wait_for(lambda: metrics_served(port), 60, "the restarted worker's metrics", logs)
    assert "Address already in use" not in (logs / "worker_again.log").read_text()


def test_requests_sent_to_an_api_process_killed_and_started_again_are_all_recorded_once(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    client = RevisitClient.from_settings(settings)
    count = 1500
    for i in range(count):
        client.request_visit(
            url=f"https://api.example/r{i}", visit_type="git", priority=1, external_id=f"k{i}"
        )

    def recorded() -> int:
        row = conn.execute("select count(*) as n from visit_requests").fetchone()
        return int(row["n"]) if row else 0

    logs = tmp_path / "logs"
    logs.mkdir()
    with running({"api": ["revisit", "api"]}, DRAMATIQ_FAST, logs) as first:
        wait_for(lambda: recorded() > 0, 60, "the first requests recorded", logs)
        kill(first["api"])
    partly = recorded()
    assert partly < count  # killed in the middle
    with running({"api_again": ["revisit", "api"]}, DRAMATIQ_FAST, logs):
        wait_for(lambda: recorded() == count, 120, "every request recorded", logs)
    rows = conn.execute("select count(distinct url) as n from visit_requests").fetchone()
    assert rows is not None and rows["n"] == count
    assert in_progress(settings) == 0


#: A Procfile process that notes its pid and that of a child it leaves behind,
#: then crashes (exit 3).
CRASHER = (
    "python -c 'import os, subprocess, sys, time;"
    ' child = subprocess.Popen(["sleep", "600"]);'
    ' open(sys.argv[1], "a").write(f"{os.getpid()} {child.pid}\\n");'
    " time.sleep(0.3); sys.exit(3)' crashes.txt"
)
STEADY = (
    "python -c 'import os, sys, time;"
    ' open(sys.argv[1], "a").write(f"{os.getpid()}\\n"); time.sleep(600)\' steady.txt'
)


def noted_pids(path: Path) -> list[list[int]]:
    if not path.exists():
        return []
    return [[int(p) for p in line.split()] for line in path.read_text().splitlines()]


@contextlib.contextmanager
def procfile_runner(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``revisit up`` on a Procfile of a crashing and a steady process, in ``tmp_path``."""
    (tmp_path / "Procfile").write_text(f"crasher: {CRASHER}\nsteady: {STEADY}\n")
    with (tmp_path / "up.log").open("wb") as log:
        runner = subprocess.Popen(
            [str(BIN / "revisit"), "up", "--procfile", "Procfile"],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
        )
        try:
            yield runner
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait(10)


def test_the_procfile_runner_starts_a_crashed_process_again_without_what_it_left(
    tmp_path: Path,
) -> None:
    crashes, steady = tmp_path / "crashes.txt", tmp_path / "steady.txt"
    with procfile_runner(tmp_path) as runner:
        wait_for(lambda: len(noted_pids(crashes)) >= 3, 30, "three starts of the crasher")
        # What the crashed process left (a child holding a port, say) was killed.
        first_child = noted_pids(crashes)[0][1]
        wait_for(lambda: not alive(first_child), 5, "the crashed process's child gone")
        [[steady_pid]] = noted_pids(steady)
        assert alive(steady_pid)  # the others ran on
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(30) == 0
    assert not alive(steady_pid)
    log = (tmp_path / "up.log").read_text()
    assert re.search(r"crasher \| exited \(code 3\) after \d+s: restarting in 2s", log), log


def test_processes_under_the_procfile_runner_stop_when_it_is_killed(tmp_path: Path) -> None:
    steady = tmp_path / "steady.txt"
    with procfile_runner(tmp_path) as runner:
        wait_for(lambda: len(noted_pids(steady)) == 1, 30, "the steady process started")
        [[steady_pid]] = noted_pids(steady)
        runner.kill()
        runner.wait(10)
        wait_for(lambda: not alive(steady_pid), 5, "the steady process gone with the runner")


def test_the_systemd_units_made_from_the_procfile_restart_and_pass_systemd_analyze(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "REVISIT_JOURNAL_METRICS_PORT": "9999"}
    made = subprocess.run(
        [str(BIN / "revisit"), "systemd-units", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    units = sorted(p.name for p in tmp_path.iterdir())
    assert sorted(Path(p).name for p in made.stdout.split()) == units
    assert "revisit-journal.service" in units and "revisit.target" in units
    journal = (tmp_path / "revisit-journal.service").read_text()
    assert f"ExecStart={BIN / 'revisit'} journal --processes 2\n" in journal
    assert "Environment=REVISIT_METRICS_PORT=9999\n" in journal
    assert "Restart=always\n" in journal and "KillMode=control-group\n" in journal
    if shutil.which("systemd-analyze") is None:
        return
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr


def test_embedded_services_stop_when_the_process_that_started_them_is_killed(
    tmp_path: Path,
) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import json, time; from app.devtools import embedded\n"
            "with embedded.services() as env:\n"
            "    print(json.dumps(env), flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        env = json.loads(holder.stdout.readline())
        psycopg.connect(env["REVISIT_DATABASE_URL"], connect_timeout=2).close()
    finally:
        holder.kill()
        holder.wait(10)
    ports = [
        urllib.parse.urlsplit(env["REVISIT_REDIS_URL"]).port,
        int(env["REVISIT_KAFKA_BROKERS"].rsplit(":", 1)[1]),
    ]

    def listening(port: int | None) -> bool:
        assert port is not None
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    def postgres_answers() -> bool:
        try:
            psycopg.connect(env["REVISIT_DATABASE_URL"], connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    wait_for(
        lambda: not postgres_answers() and not any(listening(p) for p in ports),
        15,
        "the embedded services gone",
    )


def test_a_worker_paused_past_the_scheduled_cooldown_drops_its_visit_rather_than_overlap(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    # A ladder unit of 3 s: the scheduled cooldown (7 units) is 21 s, after which
    # the scheduler takes an origin back and sends it again.
    env = {"REVISIT_WORKER_VISIT_TYPES_ALLOW": f'["{VISIT_TYPE}"]', "REVISIT_LADDER_UNIT_S": "3"}
    conn.execute("insert into visit_types (name, max_queue_length) values (%s, 5)", (VISIT_TYPE,))
    warm_url, paused_url = "sim://warm-up", "sim://paused"
    list_origins(conn, ctx, [warm_url, paused_url], visit_type=VISIT_TYPE)
    ids = {url: int(str(row["id"])) for url, row in stats_by_url(conn).items()}
    queue = lane_queue(VISIT_TYPE, "express")
    broker = make_broker(settings)
    broker.declare_queue(queue)

    def send(url: str, visit: int, duration_s: float) -> float:
        sent = time.time()
        order = VisitOrder(ids[url], url, VISIT_TYPE, {"duration_s": duration_s}, visit, sent)
        enqueue_many(broker, [visit_message(queue, order, "express", 60.0)])
        return sent

    def status(url: str) -> object:
        return stats_by_url(conn)[url]["last_visit_status"]

    logs = tmp_path / "logs"
    logs.mkdir()
    worker = ["revisit", "worker", "--lane", "express", "--threads", "2"]
    with running({"worker": worker, "journal": ["revisit", "journal"]}, env, logs) as procs:
        send(warm_url, 1, 0.0)  # both processes ready once its status is applied
        wait_for(lambda: status(warm_url) == "full", 90, "the warm-up visit", logs)
        sent = send(paused_url, 2, 10.0)
        wait_for(
            lambda: stats_by_url(conn)[paused_url]["last_visit"] is not None,
            8,
            "the visit's created status applied",
            logs,
        )
        os.killpg(procs["worker"].pid, signal.SIGSTOP)
        time.sleep(max(0.0, sent + 21.0 + 1.0 - time.time()))  # past the cooldown
        os.killpg(procs["worker"].pid, signal.SIGCONT)
        dropped = "visit 2 of sim://paused outlasted the scheduled cooldown; dropped"
        wait_for(
            lambda: dropped in (logs / "worker.log").read_text() or status(paused_url) is not None,
            10,
            "the visit to end",
            logs,
        )
        time.sleep(2.0)  # what the journal would apply
    assert status(paused_url) is None  # its final status was never published
    assert dropped in (logs / "worker.log").read_text()


#: A Dramatiq pool in small: the main process forks a child whose logs go to a
#: pipe the main reads (the child holds its read end too), then prints the
#: child's pid. Told to stop (SIGTERM), the child logs 256 KiB, more than a pipe
#: holds, and exits.
ORPHANED_POOL = """
import logging, multiprocessing, os, signal, sys, threading, time
from actors.broker import DieWithParent

def child(write_end):
    logging.basicConfig(stream=os.fdopen(write_end, "w", buffering=1), level=logging.INFO)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DieWithParent().after_process_boot(None)  # as Dramatiq does in a pool's process
    stop.wait()
    for _ in range(256):
        logging.info("x" * 1024)
    sys.exit(0)

read_end, write_end = os.pipe()
os.set_inheritable(write_end, True)
pool = multiprocessing.get_context("fork").Process(target=child, args=(write_end,))
pool.start()
reader = os.fdopen(read_end)
threading.Thread(target=lambda: [None for _ in reader], daemon=True).start()
print(pool.pid, flush=True)
time.sleep(600)
"""


def test_a_pool_process_whose_main_process_is_killed_stops_though_it_logs_a_lot() -> None:
    main = subprocess.Popen(
        [sys.executable, "-c", ORPHANED_POOL],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert main.stdout is not None
    child = int(main.stdout.readline())
    try:
        main.kill()
        main.wait(10)
        # Its logs went to stderr: no one reads the pipe any more.
        wait_for(lambda: not alive(child), 10, "the orphaned pool process gone")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
