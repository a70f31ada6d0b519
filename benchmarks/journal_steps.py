"""The journal client's batch work without Kafka, as CPU seconds per process.

On a shared machine wall-clock throughput follows the share of the cores a run
gets; CPU seconds barely do. This applies ``--messages`` encoded
origin_visit_status values (benchmarks/journal_messages.py) in batches as the
journal client does (``BatchWriter.write``, then ``place_rows``), and prints
the wall time and the CPU seconds spent by this process (decoding, refolding,
the drivers), by the PostgreSQL server processes and by Redis. Batches take
``batch // partitions`` messages in turn from each of ``--partitions``
partitions (messages spread by a hash of their key, as Kafka does), which is
how a consumer of several partitions receives them.

    .venv/bin/python benchmarks/journal_steps.py --messages 100000 --origins 20000

Run the copies of it in two trees one after the other for a
before/after in the same minute.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import sys
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.context import Context
from app.db.live import RetryingConnections
from app.domain.visit_stats import keyed_fudge
from app.journal import place_rows
from app.journal_batch import BatchWriter
from app.journal_codec import encode, visit_status_key
from app.settings import Settings
from benchmarks.common import bench_settings
from benchmarks.journal_messages import visit_statuses
from benchmarks.journal_throughput import list_origins


def batches(messages: int, origins: int, size: int, partitions: int) -> Iterator[list[bytes]]:
    """Encoded values in consumer batches: ``size // partitions`` from each partition in turn."""
    queues: list[list[bytes]] = [[] for _ in range(partitions)]
    for value in visit_statuses(messages, origins):
        key = visit_status_key(value["origin"], value["visit"], value["date"])
        queues[zlib.crc32(key) % partitions].append(encode(value))
    share = max(1, size // partitions)
    offsets = [0] * partitions
    while any(offsets[p] < len(queues[p]) for p in range(partitions)):
        batch: list[bytes] = []
        for p in range(partitions):
            batch += queues[p][offsets[p] : offsets[p] + share]
            offsets[p] += share
        yield batch


def postgres_cpu_s(postmaster: psutil.Process) -> float:
    """CPU seconds (user + system) of one PostgreSQL server: its postmaster and children."""
    total = 0.0
    for proc in [postmaster, *postmaster.children()]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def redis_cpu_s(ctx: Context) -> float:
    """CPU seconds Redis reports having used."""
    info = ctx.redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(settings: Settings, args: argparse.Namespace) -> dict[str, float]:
    ctx = Context.from_settings(settings)
    work = list(batches(args.messages, args.origins, args.batch_size, args.partitions))
    connections = RetryingConnections(settings, args.writers, wait=lambda s: False)
    writer = BatchWriter(ctx, keyed_fudge(), connections.run, args.writers)
    if not args.default_gc:
        try:
            from actors.journal import tune_gc  # as the journal process does
        except ImportError:  # a tree from before it
            pass
        else:
            tune_gc()
    now = datetime.now(tz=UTC)
    backend = connections.run(lambda c: c.execute("select pg_backend_pid() as pid").fetchone())
    postmaster = psutil.Process(int(backend["pid"])).parent()
    try:
        # One batch first, so every connection and script is warm.
        writer.write(work[0], now)
        pg0, redis0 = postgres_cpu_s(postmaster), redis_cpu_s(ctx)
        profiler = cProfile.Profile(time.process_time) if args.profile else None
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        for payloads in work[1:]:
            _outcome, rows = writer.write(payloads, now)
            place_rows(ctx, rows, now)
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        pg, redis = postgres_cpu_s(postmaster) - pg0, redis_cpu_s(ctx) - redis0
    finally:
        writer.close()
        connections.close()
    applied = sum(len(b) for b in work[1:])
    return {
        "messages": applied,
        "wall_s": wall,
        "rate": applied / wall,
        "client_cpu_us": cpu / applied * 1e6,
        "postgres_cpu_us": pg / applied * 1e6,
        "redis_cpu_us": redis / applied * 1e6,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--origins", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--default-gc", action="store_true", help="leave the collector as is")
    parser.add_argument("--profile", metavar="FILE", help="cProfile (use --writers 1)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures there")
    args = parser.parse_args()
    os.environ.setdefault("REVISIT_KAFKA_BROKERS", "127.0.0.1:9")  # not used: no broker
    with bench_settings() as settings:
        list_origins(settings, args.origins)
        figures = measure(settings, args)
    print(
        f"{figures['messages']} messages in {figures['wall_s']:.2f}s = {figures['rate']:,.0f}/s; "
        f"CPU per message: client {figures['client_cpu_us']:.1f} µs, "
        f"PostgreSQL {figures['postgres_cpu_us']:.1f} µs, Redis {figures['redis_cpu_us']:.1f} µs "
        f"(load {figures['load']:.1f})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
