"""End-to-end throughput of the journal client: Kafka -> PostgreSQL -> Redis -> commit.

Prefills a topic with ``--messages`` origin_visit_status records over
``--origins`` listed origins, then runs one JournalClient in this process until
it has committed them all, and prints messages/s. Services are started on the
spot (app.devtools.embedded) unless their addresses are given. With ``--reference
PYTHON`` it then runs benchmarks/reference_journal.py with that interpreter on
the same records against the same PostgreSQL and prints the ratio.

    PYTHONPATH=. python benchmarks/journal_throughput.py --messages 1000000 --origins 200000
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
from confluent_kafka import Message, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.journal import JOURNAL_WRITERS, JournalClient, WrittenBatch, tune_gc
from actors.journal_consumer import BATCH_SIZE
from app.db.connection import connect
from app.db.listings import register_lister
from app.db.migrate import migrate
from app.devtools import embedded
from app.inputs.listing import ListedOriginIn
from app.kafka.client import ensure_topics
from app.kafka.codec import encode, visit_status_key
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.settings import Settings
from benchmarks.journal_clients import consume_with_processes
from benchmarks.journal_messages import START, origin_url, visit_statuses
from tests.processes import with_constants

LISTING_CHUNK = 10000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--origins", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=None, help="default: settings")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--clients", type=int, default=1, help="journal client processes")
    parser.add_argument("--database-url", help="admin DSN of a PostgreSQL (default: embedded)")
    parser.add_argument("--redis-url")
    parser.add_argument("--kafka-brokers")
    parser.add_argument("--reference", metavar="PYTHON", help="python of a swh-scheduler venv")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the consuming phase")
    parser.add_argument("--json", metavar="FILE", help="also write the figures there")
    return parser.parse_args()


def create_database(admin_dsn: str, name: str) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"drop database if exists {name} with (force)")
        conn.execute(f"create database {name}")
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


def list_origins(settings: Settings, origins: int) -> None:
    ctx = Context.from_settings(settings)
    ctx.redis.flushdb()
    with connect(settings) as conn:
        lister = register_lister(conn, "bench", "forges", None)
        for start in range(0, origins, LISTING_CHUNK):
            rows = [
                (i + 1, ListedOriginIn(url=origin_url(i), visit_type="git"))
                for i in range(start, min(origins, start + LISTING_CHUNK))
            ]
            record_listed_origins(conn, ctx, lister, rows, START)
        # A fixed queue position: targets do not depend on when the run happens.
        conn.execute(
            "insert into visit_scheduler_queue_position (visit_type, position) "
            "values ('git', %s) on conflict (visit_type) do update set position = %s",
            (START, START),
        )


def prefill(
    settings: Settings, messages: int, origins: int, url_of: Callable[[int], str] = origin_url
) -> None:
    producer = Producer(
        {
            "bootstrap.servers": settings.kafka_brokers,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
            "log_level": 3,
        }
    )
    for value in visit_statuses(messages, origins, url_of=url_of):
        key = visit_status_key(value["origin"], value["visit"], value["date"])
        while True:
            try:
                producer.produce(settings.journal_topic, value=encode(value), key=key)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(300):
        raise SystemExit("prefill: the broker did not acknowledge every message")


def backend_pids(client: JournalClient) -> list[int]:
    """The PostgreSQL backends of ``client``'s connections (opened here)."""
    with contextlib.ExitStack() as stack:
        return [
            stack.enter_context(client.connections.borrow()).info.backend_pid
            for _ in range(JOURNAL_WRITERS)
        ]


def backend_cpu_s(pids: list[int]) -> float | None:
    """CPU seconds used so far by the PostgreSQL backends ``pids`` (None when the
    server does not run on this host)."""
    total = 0.0
    for pid in pids:
        proc = Path(f"/proc/{pid}")
        try:
            if proc.joinpath("comm").read_text().strip() != "postgres":
                return None
            # utime and stime, the 14th and 15th fields, after the command
            fields = proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def consume_all(
    settings: Settings, messages: int, profile: str | None
) -> tuple[float, float, float | None]:
    """Seconds from the first batch to the commit of the last, as ``revisit
    journal`` runs the client (``JournalClient.run``), and the CPU seconds this
    process spent meanwhile (all its threads: the figure the load moves least)
    and those of its PostgreSQL backends (None: not measured)."""
    client = JournalClient(settings)
    tune_gc()
    pids = backend_pids(client)
    stop = threading.Event()
    marks: dict[str, float] = {}
    done = 0
    profiler = cProfile.Profile() if profile else None
    poll, finish = client.poll_batch, client.finish

    def first_poll(timeout_s: float | None = None) -> list[Message]:
        batch = poll(timeout_s)
        if batch and not marks:
            marks.update(started=time.perf_counter(), cpu=time.process_time())
            marks["postgres"] = backend_cpu_s(pids) or 0.0
            if profiler:
                profiler.enable()
        return batch

    def counted_finish(written: WrittenBatch) -> None:
        nonlocal done
        finish(written)  # the offsets committed
        done += len(written.messages)
        if done >= messages and not stop.is_set():
            marks.update(finished=time.perf_counter(), cpu_end=time.process_time())
            postgres = backend_cpu_s(pids)
            marks["postgres_end"] = -1.0 if postgres is None else postgres
            stop.set()

    client.poll_batch = first_poll  # type: ignore[method-assign]
    client.finish = counted_finish  # type: ignore[method-assign]
    try:
        client.run(stop)  # closes the client when stopped
    finally:
        if profiler and profile:
            profiler.disable()
            profiler.dump_stats(profile)
    postgres_cpu_s = None
    if marks["postgres_end"] >= 0:
        postgres_cpu_s = marks["postgres_end"] - marks["postgres"]
    return marks["finished"] - marks["started"], marks["cpu_end"] - marks["cpu"], postgres_cpu_s


def stats_row_writes(settings: Settings) -> int:
    """Row writes of origin_visit_stats so far: every write bumps a row's version,
    from 1 when inserted."""
    with psycopg.connect(settings.database_dsn()) as conn:
        row = conn.execute("select coalesce(sum(version), 0) from origin_visit_stats").fetchone()
    return int(row[0]) if row else 0


def run(args: argparse.Namespace, env: dict[str, str]) -> None:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    overrides = {
        "REVISIT_DATABASE_URL": create_database(env["REVISIT_DATABASE_URL"], name),
        "REVISIT_REDIS_URL": env["REVISIT_REDIS_URL"],
        "REVISIT_KAFKA_BROKERS": env["REVISIT_KAFKA_BROKERS"],
        "REVISIT_JOURNAL_TOPIC": f"bench-journal-{name}",
        "REVISIT_DEAD_LETTER_TOPIC": f"bench-dead-letter-{name}",
        "REVISIT_JOURNAL_GROUP_ID": f"bench-{name}",
        "REVISIT_WORKER_VISIT_TYPES_ALLOW": '["git"]',
    }
    constants: dict[str, float] = {"app.kafka.client.SESSION_TIMEOUT_MS": 6000}
    if args.batch_size:
        constants["actors.journal_consumer.BATCH_SIZE"] = args.batch_size
    overrides |= with_constants(constants)
    os.environ.update(overrides)
    for name, value in constants.items():  # this process's client: set them here too
        module, _, attribute = name.rpartition(".")
        setattr(importlib.import_module(module), attribute, value)
    settings = Settings()
    migrate(settings.database_dsn())
    t0 = time.perf_counter()
    list_origins(settings, args.origins)
    ensure_topics(settings, partitions=args.partitions)
    t1 = time.perf_counter()
    prefill(settings, args.messages, args.origins)
    t2 = time.perf_counter()
    print(f"listed {args.origins} origins in {t1 - t0:.1f}s", end="; ")
    print(f"prefilled {args.messages} messages in {t2 - t1:.1f}s")
    writes_before = stats_row_writes(settings)
    if args.clients > 1:
        elapsed = consume_with_processes(settings, args.messages, args.clients, args.partitions)
        cpu_s, postgres_cpu_s = None, None
    else:
        elapsed, cpu_s, postgres_cpu_s = consume_all(settings, args.messages, args.profile)
    rate = args.messages / elapsed
    print(
        f"journal client: {args.messages} messages in {elapsed:.2f}s = {rate:,.0f} messages/s "
        f"(batches of up to {args.batch_size or BATCH_SIZE}, "
        f"{args.partitions} partitions, {args.clients} client processes)"
    )
    with psycopg.connect(settings.database_dsn()) as conn:
        row = conn.execute(
            "select count(*), sum(eventful_visits), sum(uneventful_visits), sum(failed_visits)"
            " from origin_visit_stats where last_visit is not null"
        ).fetchone()
    assert row is not None
    print(f"stats rows visited: {row[0]}, eventful/uneventful/failed: {row[1]}/{row[2]}/{row[3]}")
    writes = stats_row_writes(settings) - writes_before
    print(f"stats row writes: {writes} ({writes / args.messages:.3f} a message)")
    figures = {"journal_rate": rate, "journal_row_writes": writes}
    if cpu_s is not None:
        print(f"client CPU: {cpu_s:.1f}s, {1e6 * cpu_s / args.messages:.0f} µs a message")
        figures["journal_client_cpu_us"] = 1e6 * cpu_s / args.messages
    if postgres_cpu_s is not None:
        us = 1e6 * postgres_cpu_s / args.messages
        print(
            f"PostgreSQL CPU (the client's backends): {postgres_cpu_s:.1f}s, {us:.0f} µs a message"
        )
        figures["journal_postgres_cpu_us"] = us
    if args.reference:
        figures["reference_journal_rate"] = reference(args, env["REVISIT_DATABASE_URL"], rate)
    if args.json:
        Path(args.json).write_text(json.dumps(figures))


def reference(args: argparse.Namespace, admin_dsn: str, ours: float) -> float:
    script = Path(__file__).with_name("reference_journal.py")
    command = [args.reference, str(script), "--database-url", admin_dsn]
    command += ["--messages", str(args.messages), "--origins", str(args.origins)]
    if args.batch_size:
        command += ["--batch-size", str(args.batch_size)]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    print(out, end="")
    theirs = float(out.rsplit("=", 1)[1].split()[0].replace(",", ""))
    print(f"ratio revisit / reference: {ours / theirs:.1f}x")
    return theirs


def main() -> None:
    args = parse_args()
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(
            embedded.services(args.database_url, args.redis_url, args.kafka_brokers)
        )
        run(args, env)


if __name__ == "__main__":
    main()
