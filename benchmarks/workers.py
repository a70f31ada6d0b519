"""Worker throughput and end-to-end visit latency (issue 6).

    python -m benchmarks.workers --visits 3000 --threads 8 --seconds 40

1. No-op simulated visits: ``--visits`` messages are enqueued on one express
   queue, then one worker process (``--threads`` threads) drains it; prints
   visits/s per worker process (each visit publishes two journal statuses).
   With ``--requests``, they are requests' visits (each one's abort watched).
2. Steady load: scheduler, one worker process and the journal client run on
   ``--origins`` simulated origins that are revisited as soon as their 1 s
   cooldown ends; prints the time from scheduling to the recorded result
   (the status date the worker publishes; p50, p95, max) over the last ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import dramatiq
import redis

from actors.broker import make_broker
from app.db.connection import connect
from app.db.listings import register_lister
from app.inputs.listing import ListedOriginIn
from app.kafka.client import StatusPublisher, ensure_topics
from app.kafka.codec import encode, visit_status_value
from app.loaders.zygote import dying_with_this_process
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.scheduling import VisitOrder
from app.services.visit_types import VisitTypeChange, add_visit_type
from app.settings import Settings
from benchmarks.common import bench_settings
from queues.dramatiq_broker import enqueue_many
from queues.keys import DramatiqQueueKeys
from tests.processes import with_constants

BIN = Path(sys.executable).parent


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(BIN / "revisit"), *args],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=dying_with_this_process(),
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def publish_costs(settings: Settings, count: int) -> tuple[float, float]:
    """Milliseconds per ``created`` status: published as a worker does (waiting for
    the broker's acknowledgement) and produced without waiting (one flush at the end)."""
    ensure_topics(settings)
    publisher = StatusPublisher(settings)
    publisher.publish("sim://warm/up", "simulated", 1, "created", None)
    started = time.perf_counter()
    for i in range(count):
        publisher.publish(f"sim://ack/{i}", "simulated", 1, "created", None, {"lane": "express"})
    acked = (time.perf_counter() - started) / count
    raw = publisher.producer.producer  # librdkafka's, under the resilient wrapper
    started = time.perf_counter()
    for i in range(count):
        value = visit_status_value(
            f"sim://noack/{i}", 1, datetime.now(tz=UTC), "created", None, "simulated", None
        )
        raw.produce(publisher.topic, value=encode(value))
        raw.poll(0)
    raw.flush(30)
    unacked = (time.perf_counter() - started) / count
    print(
        f"publishing created: {acked * 1000:.2f} ms waiting for the acknowledgement,"
        f" {unacked * 1000:.3f} ms without waiting ({count} statuses)"
    )
    return acked * 1000, unacked * 1000


def noop_rate(
    settings: Settings, env: dict[str, str], logs: Path, args: argparse.Namespace
) -> float:
    """Visits/s of one worker process draining ``args.visits`` no-op simulated visits
    (requests' visits with ``args.requests``)."""
    visits, threads = args.visits, args.threads
    broker = make_broker(settings)
    now = time.time()
    orders = [
        VisitOrder(
            0,
            f"sim://noop/{i}",
            "simulated",
            {},
            i + 1,
            now,
            request_id=i + 1 if args.requests else None,
        )
        for i in range(visits)
    ]
    messages: list[dramatiq.Message[object]] = [
        dramatiq.Message(
            queue_name="visit.simulated.express",
            actor_name="visit",
            args=(),
            kwargs={**o.as_kwargs(), "lane": "express"},
            options={},
        )
        for o in orders
    ]
    enqueue_many(broker, messages)
    client = redis.Redis.from_url(settings.redis_dsn())
    queued = DramatiqQueueKeys(broker.namespace, "visit.simulated.express").messages
    worker = start(["worker", "--lane", "express", "--threads", str(threads)], env, logs / "w.log")
    while client.hlen(queued) == visits:
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited:\n{(logs / 'w.log').read_text()[-2000:]}")
        time.sleep(0.01)
    started = time.perf_counter()
    while client.hlen(queued) > 0:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    stop(worker)
    print(
        f"no-op visits: {visits} in {elapsed:.1f} s = {visits / elapsed:,.0f} "
        f"visits/s for one worker process of {threads} threads"
    )
    return float(visits / elapsed)


def steady_load(
    settings: Settings, env: dict[str, str], logs: Path, args: argparse.Namespace
) -> None:
    """Scheduler, worker and journal client on simulated origins; print the latencies."""
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        lister = register_lister(conn, "bench", "workers", None)
        rows = [
            (i + 1, ListedOriginIn(url=f"sim://steady/{i}", visit_type="simulated"))
            for i in range(args.origins)
        ]
        record_listed_origins(conn, ctx, lister, rows, datetime.now(tz=UTC))
        procs = [
            start(["scheduler"], env, logs / "scheduler.log"),
            start(
                ["worker", "--lane", "recurrent", "--threads", str(args.threads)],
                env,
                logs / "worker2.log",
            ),
            start(["journal"], env, logs / "journal.log"),
        ]
        time.sleep(10)  # warm up: group join, first visits
        since = datetime.now(tz=UTC)
        time.sleep(args.seconds)
        rows2 = conn.execute(
            "select extract(epoch from last_final_date - last_scheduled) as s "
            "from origin_visit_stats where last_final_date > %s "
            "and last_final_date >= last_scheduled",
            (since,),
        ).fetchall()
        visits = conn.execute(
            "select coalesce(sum(eventful_visits + uneventful_visits + failed_visits), 0) as n"
            " from origin_visit_stats"
        ).fetchone()
        for proc in procs:
            stop(proc)
    latencies = sorted(float(r["s"]) for r in rows2)
    if latencies:
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        print(
            f"steady load: {len(latencies)} origins sampled, schedule-to-result "
            f"p50 {statistics.median(latencies):.2f} s, p95 {p95:.2f} s, "
            f"max {latencies[-1]:.2f} s ({visits['n'] if visits else 0} visits in all)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--visits", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--requests", action="store_true", help="no-op requests' visits")
    parser.add_argument("--origins", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--publishes", type=int, default=2000)
    parser.add_argument("--json", metavar="FILE", help="also write the figures there")
    args = parser.parse_args()
    with (
        bench_settings() as settings,
        tempfile.TemporaryDirectory() as tmp,
    ):
        env = {
            **os.environ,
            "REVISIT_DATABASE_URL": settings.database_dsn(),
            "REVISIT_REDIS_URL": settings.redis_dsn(),
            "REVISIT_KAFKA_BROKERS": settings.kafka_brokers,
            "REVISIT_WORKER_VISIT_TYPES_ALLOW": '["simulated"]',
            "REVISIT_LADDER_UNIT_S": "1",
            **with_constants(
                {
                    "actors.scheduler.POLL_INTERVAL_S": 0.2,
                    "actors.journal_consumer.BATCH_TIMEOUT_S": 0.1,
                    "app.kafka.client.SESSION_TIMEOUT_MS": 1000,
                }
            ),
        }
        with connect(settings) as conn:  # workers serve the table's visit types
            add_visit_type(conn, VisitTypeChange(name="simulated", max_queue_length=200))
        figures = {"noop_visits_per_s": noop_rate(settings, env, Path(tmp), args)}
        ack, noack = publish_costs(settings, args.publishes)
        figures |= {"created_ack_ms": ack, "created_noack_ms": noack}
        if args.seconds > 0:
            steady_load(settings, env, Path(tmp), args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
