"""Soak: the Procfile's processes on real servers under random faults (issue 12).

    python -m benchmarks.soak --origins 10000 --seconds 1800 --seed 1

Starts its own PostgreSQL, Redis and Kafka-protocol broker, lists
``--origins`` ``simulated`` origins, runs the Procfile's processes with short
cooldowns, and injects one fault every few seconds, each kind in turn: kill -9
of every process kind, kill -9 of the express worker pool's main process
alone, the express worker paused (SIGSTOP) past the scheduled cooldown, Redis
FLUSHALL and restart, broker restart, PostgreSQL unavailable for a few
seconds, poison journal messages and malformed API payloads. The soak is
the processes' supervisor (as systemd or Kubernetes would be): it starts a
killed process again, and counts as "restarted by hand" any process that
exited without being killed. Faults stop ``--settle-s`` before the end;
then it prints the figures of issue 12, a table of what each kind of fault
cost (issue 33), and, with ``--json``, writes them to a file.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dramatiq
import psycopg
import redis
from confluent_kafka import Producer

from actors.broker import make_broker
from app.db.connection import connect
from app.db.listings import register_lister
from app.db.migrate import migrate
from app.devtools import embedded
from app.inputs.listing import ListedOriginIn
from app.kafka.client import producer_config
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.mirror_sync import check_settled
from app.settings import Settings
from benchmarks.soak_checks import JournalWatch, places_report
from benchmarks.soak_prometheus import METRICS_CONSTANTS, Requests, draw, metrics_env, prometheus
from benchmarks.soak_supervisor import Supervisor
from tests.processes import with_constants

VISIT_TYPE = "simulated"
PROCESSES = {
    "scheduler": ["scheduler"],
    "express_worker": ["worker", "--lane", "express", "--processes", "1", "--threads", "4"],
    "slow_worker": ["worker", "--lane", "slow", "--processes", "1", "--threads", "2"],
    "priority_worker": ["worker", "--lane", "priority", "--processes", "1", "--threads", "2"],
    "journal": ["journal"],
    "api": ["api"],
}
SERVICE_FAULTS = ("redis_flushall", "redis_restart", "broker_restart", "postgres_outage")
INPUT_FAULTS = ("poison", "bad_api")
#: The express worker pool's main process killed alone, and the pool paused.
WORKER_FAULTS = ("kill_main_express_worker", "pause_express_worker")
ALL_FAULTS = tuple(f"kill_{p}" for p in PROCESSES) + WORKER_FAULTS + SERVICE_FAULTS + INPUT_FAULTS
#: Short cooldowns, so origins come round again within the run.
SOAK_ENV = {
    "REVISIT_WORKER_VISIT_TYPES_ALLOW": f'["{VISIT_TYPE}"]',
    "REVISIT_LADDER_UNIT_S": "1",
    "REVISIT_LOG_LEVEL": "WARNING",
}
#: Quick loops, so faults are noticed and healed within the run.
SOAK_CONSTANTS = {
    "actors.scheduler.POLL_INTERVAL_S": 0.5,
    "actors.journal_consumer.BATCH_TIMEOUT_S": 0.2,
    "app.kafka.client.SESSION_TIMEOUT_MS": 3000,
    "actors.journal_consumer.REJOIN_AFTER_S": 10,
    "queues.dramatiq_broker.HEARTBEAT_TIMEOUT_MS": 5000,
}
OUTAGE_S = 3.0
#: A pause past the scheduled cooldown (7 ladder units of 1 s): the scheduler
#: sends the paused worker's origins again meanwhile.
PAUSE_S = 9.0


@dataclass
class Soak:
    """The run's services, processes and what it observed."""

    settings: Settings
    admin_dsn: str
    redis_service: embedded.Restartable
    broker_service: embedded.Restartable
    supervisor: Supervisor
    rng: random.Random
    samples: list[tuple[float, int]] = field(default_factory=list)
    faults: list[tuple[str, float]] = field(default_factory=list)
    #: When each fault of ``faults`` began (time.monotonic()).
    fault_starts: list[float] = field(default_factory=list)
    poison_sent: int = 0
    #: Poison value -> when it was sent (Unix seconds).
    poison_sent_at: dict[bytes, float] = field(default_factory=dict)
    bad_api_sent: int = 0
    requests: Requests | None = None

    def visits(self) -> int | None:
        """Visits applied so far (None while PostgreSQL is away)."""
        try:
            with connect(self.settings) as conn:
                row = conn.execute(
                    "select coalesce(sum(eventful_visits + uneventful_visits + failed_visits),"
                    " 0)::bigint as n from origin_visit_stats"
                ).fetchone()
        except psycopg.Error:
            return None
        return int(row["n"]) if row else 0

    def inject(self, kind: str) -> None:
        """One fault; returns when the faulty service is back."""
        if kind.startswith("kill_main_"):
            self.supervisor.kill_main(kind[len("kill_main_") :])
        elif kind.startswith("pause_"):
            self.supervisor.pause(kind[len("pause_") :], PAUSE_S)
        elif kind.startswith("kill_"):
            self.supervisor.kill(kind[len("kill_") :])
        elif kind == "redis_flushall":
            redis.Redis.from_url(self.settings.redis_dsn()).flushall()
        elif kind == "redis_restart":
            self.redis_service.stop()
            time.sleep(OUTAGE_S)
            self.redis_service.start()
        elif kind == "broker_restart":
            self.broker_service.stop()
            self.broker_service.start()
        elif kind == "postgres_outage":
            self._database_available(False)
            time.sleep(OUTAGE_S)
            self._database_available(True)
        elif kind == "poison":
            self._poison(5)
        elif kind == "bad_api":
            self._bad_api(3)

    def _database_available(self, available: bool) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            flag = "true" if available else "false"
            admin.execute(f"alter database soak with allow_connections {flag}")
            if not available:
                admin.execute(
                    "select pg_terminate_backend(pid) from pg_stat_activity where datname = 'soak'"
                )

    def _poison(self, count: int) -> None:
        producer = Producer(producer_config(self.settings))
        for _ in range(count):
            self.poison_sent += 1
            value = b"\xc1" + f"soak-poison-{self.poison_sent}".encode()
            self.poison_sent_at[value] = time.time()
            producer.produce(self.settings.journal_topic, value=value)
        producer.flush(30)

    def _bad_api(self, count: int) -> None:
        broker = make_broker(self.settings)
        for i in range(count):
            payload: dict[str, Any] = {"url": i, "visit_type": VISIT_TYPE, "priority": "high"}
            broker.enqueue(
                dramatiq.Message(
                    queue_name="revisit.api",
                    actor_name="request_visit",
                    args=(),
                    kwargs={"payload": payload},
                    options={},
                )
            )
            self.bad_api_sent += 1

    def resume_times(self) -> dict[str, list[float | None]]:
        """Per fault kind, seconds from the end of each fault to the next applied visit."""
        times: dict[str, list[float | None]] = {}
        for kind, at in self.faults:
            before = max((n for t, n in self.samples if t <= at), default=0)
            resumed = next((t - at for t, n in self.samples if t > at and n > before), None)
            times.setdefault(kind, []).append(resumed)
        return times


def list_origins(settings: Settings, count: int, rng: random.Random) -> None:
    """``count`` simulated origins, most succeeding, some failing or gone."""
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        conn.execute(
            "insert into visit_types (name, max_queue_length) values (%s, 200)"
            " on conflict do nothing",
            (VISIT_TYPE,),
        )
        lister = register_lister(conn, "soak", "forge", None)
        rows = []
        now = datetime.now(tz=UTC)
        for i in range(count):
            status = rng.choices(["full", "failed", "not_found"], [90, 8, 2])[0]
            arguments = {"duration_s": rng.choice([0.01, 0.05, 0.2]), "status": status}
            # A third with a forge-reported last update, in the last two days.
            updated = now - timedelta(hours=rng.uniform(0, 48)) if i % 3 == 0 else None
            origin = ListedOriginIn(
                url=f"sim://soak/{i}",
                visit_type=VISIT_TYPE,
                extra_loader_arguments=arguments,
                last_update=updated,
            )
            rows.append((i + 1, origin))
        for start in range(0, count, 5000):
            chunk = rows[start : start + 5000]
            record_listed_origins(conn, ctx, lister, chunk, now)


@contextlib.contextmanager
def services(workdir: Path) -> Iterator[tuple[str, embedded.Restartable, embedded.Restartable]]:
    """PostgreSQL (admin DSN), and a Redis and a broker that the soak may restart."""
    with (
        embedded.postgres(workdir) as admin_dsn,
        embedded.Restartable(embedded.redis_server, workdir) as redis_service,
        embedded.Restartable(embedded.kafka_broker, workdir) as broker_service,
    ):
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute("drop database if exists soak")
            admin.execute("create database soak")
        yield admin_dsn, redis_service, broker_service


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the soak; return its figures."""
    rng = random.Random(args.seed)
    kinds = [k for k in ALL_FAULTS if any(k.startswith(p) for p in args.faults.split(","))]
    with tempfile.TemporaryDirectory(prefix="revisit-soak-") as tmp:
        workdir = Path(tmp)
        logdir = Path(args.logs) if args.logs else workdir
        logdir.mkdir(parents=True, exist_ok=True)
        with services(workdir) as (admin_dsn, redis_service, broker_service):
            info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
            info["dbname"] = "soak"
            dsn = psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
            migrate(dsn)
            env = {
                **SOAK_ENV,
                "REVISIT_DATABASE_URL": dsn,
                "REVISIT_REDIS_URL": redis_service.address,
                "REVISIT_KAFKA_BROKERS": broker_service.address,
            }
            os.environ.update(env)  # this process reads the same settings as the others
            settings = Settings()
            list_origins(settings, args.origins, rng)
            own = metrics_env(list(PROCESSES)) if args.dashboard else {}
            extra = {**SOAK_CONSTANTS, **(METRICS_CONSTANTS if args.dashboard else {})}
            supervisor = Supervisor(PROCESSES, with_constants(extra, env), logdir, own)
            soak = Soak(settings, admin_dsn, redis_service, broker_service, supervisor, rng)
            if not args.dashboard:
                return drive(soak, kinds, args)
            soak.requests = Requests(
                settings, [f"sim://soak/{i}" for i in range(args.origins)], rng
            )
            with prometheus(own, logdir) as url:
                started_at = time.time()
                report = drive(soak, kinds, args)
                draw(url, Path(args.dashboard), started_at)
            return {**report, "save_code_now_requests": soak.requests.sent}


def drive(soak: Soak, kinds: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Start the processes, inject faults until ``settle_s`` before the end, then measure."""
    watch = JournalWatch(soak.settings)
    try:
        return _drive(soak, watch, kinds, args)
    finally:
        soak.supervisor.stop_all()
        watch.close()


def _drive(
    soak: Soak, watch: JournalWatch, kinds: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    for name in PROCESSES:
        soak.supervisor.start(name)
    started = time.monotonic()
    end = started + args.seconds
    faults_end = end - args.settle_s
    next_fault = started + args.warmup_s
    order: list[str] = []
    last_fault = started
    while (now := time.monotonic()) < end:
        soak.supervisor.tend()
        watch.poll()
        if soak.requests is not None:
            soak.requests.tick(VISIT_TYPE)
        visits = soak.visits()
        if visits is not None:
            soak.samples.append((time.monotonic(), visits))
        if kinds and now >= next_fault and now < faults_end:
            order = order or soak.rng.sample(kinds, len(kinds))
            kind = order.pop()
            soak.fault_starts.append(time.monotonic())
            soak.inject(kind)
            if kind == "broker_restart":
                watch.after_broker_restart()
            last_fault = time.monotonic()
            soak.faults.append((kind, last_fault))
            next_fault = last_fault + soak.rng.uniform(args.fault_every_s / 2, args.fault_every_s)
        time.sleep(0.5)
    last_fault_at = wall(last_fault)
    # Measured at rest: what is left in flight stays in flight on both sides. The
    # journal client stops last, so that it applies the statuses of the last visits.
    soak.supervisor.stop_all(last="journal")
    return measure(soak, watch, started, last_fault_at)


def wall(monotonic_s: float) -> float:
    """The Unix time of a time.monotonic() reading."""
    return time.time() - (time.monotonic() - monotonic_s)


def poison_report(soak: Soak, watch: JournalWatch) -> dict[str, int]:
    """Poison not dead-lettered: lost with a restart of the memory-only broker
    (sent before one), or missing (sent after the last one: a fault)."""
    restarts = [wall(at) for kind, at in soak.faults if kind == "broker_restart"]
    unseen = [sent for value, sent in soak.poison_sent_at.items() if not watch.saw_poison(value)]
    lost = sum(1 for sent in unseen if any(r > sent for r in restarts))
    return {"poison_lost_with_a_broker_restart": lost, "poison_missing": len(unseen) - lost}


def measure(
    soak: Soak, watch: JournalWatch, started: float, last_fault_at: float
) -> dict[str, Any]:
    """The figures of issue 12, at the end of the run."""
    ctx = Context.from_settings(soak.settings)
    with connect(soak.settings) as conn:
        differences = check_settled(conn, ctx, VISIT_TYPE, lambda: datetime.now(tz=UTC))
        places = places_report(conn, ctx, VISIT_TYPE, last_fault_at)
        applied = {
            str(r["url"]): r["last_visit_number"]
            for r in conn.execute(
                "select url, last_visit_number from origin_visit_stats where visit_type = %s",
                (VISIT_TYPE,),
            )
        }
    watch.poll(5.0)
    resume = soak.resume_times()
    visits = soak.samples[-1][1] if soak.samples else 0
    warm = next((t for t, n in soak.samples if n > 0), started)
    return {
        "visits": visits,
        "visits_per_s": round(visits / max(1e-9, soak.samples[-1][0] - warm), 2)
        if soak.samples
        else 0.0,
        "faults": dict(Counter(kind for kind, _ in soak.faults)),
        "resume_s": {
            kind: {
                "p50": round(statistics.median(done), 2) if done else None,
                "max": round(max(done), 2) if done else None,
                "never": sum(1 for t in times if t is None),
            }
            for kind, times in resume.items()
            for done in [[t for t in times if t is not None]]
        },
        "restarted_by_hand": sum(soak.supervisor.by_hand.values()),
        "mirror_differences": len(differences),
        "mirror_difference_examples": [str(d) for d in differences[:5]],
        **places,
        "overlapping_visits": len(watch.overlaps()),
        "overlap_examples": watch.overlaps()[:5],
        "fault_log": [
            f"{kind}@{time.time() - (time.monotonic() - at):.1f}" for kind, at in soak.faults
        ],
        "poison_sent": soak.poison_sent,
        "poison_dead_lettered": watch.poison_dead_lettered,
        **poison_report(soak, watch),
        "bad_api_payloads_sent": soak.bad_api_sent,
        "final_statuses_published": watch.finals,
        "statuses_never_applied": len(watch.never_applied(applied)),
        "never_applied_examples": [text for _, text in watch.never_applied(applied)[:5]],
        "per_fault": per_fault(soak, watch, applied),
    }


def per_fault(
    soak: Soak, watch: JournalWatch, applied: dict[str, int | None]
) -> dict[str, dict[str, Any]]:
    """Per kind of fault: its count, recovery seconds (median and max from its end
    to the next applied visit; never: none followed), and what happened from its
    start to the next fault's: restarts by hand, overlapping visits (by the later
    visit's start), final statuses published that PostgreSQL never applied. What
    came before the first fault is under ``none``."""
    starts = [wall(at) for at in soak.fault_starts]
    kinds = [kind for kind, _ in soak.faults]

    def blamed(at: float) -> str:
        index = bisect.bisect_right(starts, at) - 1
        return kinds[index] if index >= 0 else "none"

    rows: dict[str, dict[str, Any]] = {
        kind: {"count": 0, "restarted_by_hand": 0, "overlapping_visits": 0, "never_applied": 0}
        for kind in ["none", *kinds]
    }
    for kind in kinds:
        rows[kind]["count"] += 1
    for kind, times in soak.resume_times().items():
        done = [t for t in times if t is not None]
        rows[kind]["recovery_s_p50"] = round(statistics.median(done), 2) if done else None
        rows[kind]["recovery_s_max"] = round(max(done), 2) if done else None
        rows[kind]["never_recovered"] = len(times) - len(done)
    for _, at in soak.supervisor.by_hand_at:
        rows[blamed(wall(at))]["restarted_by_hand"] += 1
    for at, _ in watch.overlapping():
        rows[blamed(at)]["overlapping_visits"] += 1
    for at, _ in watch.never_applied(applied):
        rows[blamed(at)]["never_applied"] += 1
    return rows


def print_fault_table(rows: dict[str, dict[str, Any]]) -> None:
    """The per-fault figures as a table."""
    columns: tuple[str, ...] = ("count", "recovery_s_p50", "recovery_s_max", "never_recovered")
    columns += ("restarted_by_hand", "overlapping_visits", "never_applied")
    print(f"{'fault':<26}" + "".join(f"{c:>19}" for c in columns))
    for kind, row in sorted(rows.items()):
        cells = ("-" if row.get(c) is None else str(row[c]) for c in columns)
        print(f"{kind:<26}" + "".join(f"{c:>19}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--minutes", type=float, help="the run's length, instead of --seconds")
    parser.add_argument("--settle-s", type=float, default=60, help="quiet time at the end")
    parser.add_argument("--warmup-s", type=float, default=10)
    parser.add_argument("--fault-every-s", type=float, default=8)
    parser.add_argument("--faults", default="kill,pause,redis,broker,postgres,poison,bad_api")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--logs", default="", help="keep the process logs in this folder")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    parser.add_argument("--dashboard", default="", help="scrape, then draw the dashboard here")
    args = parser.parse_args()
    if args.minutes is not None:
        args.seconds = args.minutes * 60
    report = run(args)
    load = os.getloadavg()[0]
    for key, value in report.items():
        if key != "per_fault":
            print(f"{key}: {value}")
    print_fault_table(report["per_fault"])
    print(f"load average (1 min) at the end: {load:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "load_1min": load}, indent=2))


if __name__ == "__main__":
    main()
