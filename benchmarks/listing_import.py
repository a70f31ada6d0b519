"""Listing import, mirror rebuild and Redis memory per origin (issue 3 targets).

    python -m benchmarks.listing_import --origins 1000000

Prints origins/s for the import (parse + Postgres + Redis, in the CLI's
batches), with the CPU seconds it cost per 1M origins (this process,
PostgreSQL, Redis: less sensitive than the rate to other work on the host),
the rebuild time, and Redis bytes per mirrored origin, each with its target
and the ratio to the reference scheduler's listing ingestion (about 6,500
origins/s measured on the same kind of machine, DESIGN.md).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import psutil

from app.db.connection import connect
from app.db.listings import register_lister
from app.inputs.listing import ListingInputError, NumberedRow, batches
from app.services.context import Context
from app.services.listing import IMPORT_WRITERS, import_listing
from app.services.mirror_sync import rebuild
from benchmarks.common import bench_settings, listing_lines
from benchmarks.scheduling import postgres_cpu_s, redis_cpu_s

REFERENCE_ORIGINS_PER_S = 6500.0


def now() -> datetime:
    return datetime.now(tz=UTC)


def parsed(args: argparse.Namespace) -> Iterator[list[NumberedRow] | ListingInputError]:
    return batches(listing_lines(args.origins), args.batch_size, csv_format=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=50_000)
    parser.add_argument(
        "--writers", type=int, default=IMPORT_WRITERS, help="Postgres connections writing"
    )
    args = parser.parse_args()
    with bench_settings() as settings:
        ctx = Context.from_settings(settings)
        ctx.redis.flushdb()
        base_memory = int(ctx.redis.info("memory")["used_memory"])
        with connect(settings) as conn:
            lister = register_lister(conn, "bench", "forge", None)
            backend = conn.execute("select pg_backend_pid() as pid").fetchone()
            assert backend is not None
            postmaster = psutil.Process(int(backend["pid"])).parent()
            assert postmaster is not None
            cpu = (time.process_time(), postgres_cpu_s(postmaster), redis_cpu_s(ctx))
            started = time.perf_counter()
            extra = [connect(settings) for _ in range(args.writers - 1)]
            report = import_listing(conn, ctx, lister, parsed(args), now, extra)
            assert report.recorded == args.origins and not report.refused
            elapsed = time.perf_counter() - started
            client_s, pg_s, redis_s = (
                after - before
                for after, before in zip(
                    (time.process_time(), postgres_cpu_s(postmaster), redis_cpu_s(ctx)),
                    cpu,
                    strict=True,
                )
            )
            mirrored = sum(ctx.mirror.sizes("git").values())
            memory = int(ctx.redis.info("memory")["used_memory"]) - base_memory
            rate = args.origins / elapsed
            print(
                f"import: {args.origins} origins in {elapsed:.1f} s = {rate:,.0f} origins/s "
                f"(target 50,000; {rate / REFERENCE_ORIGINS_PER_S:.1f}x the reference)"
            )
            per_million = 1e6 / args.origins
            print(
                f"import CPU per 1M origins: client {client_s * per_million:.1f} s,"
                f" PostgreSQL {pg_s * per_million:.1f} s, Redis {redis_s * per_million:.1f} s,"
                f" total {(client_s + pg_s + redis_s) * per_million:.1f} s"
            )
            print(
                f"redis: {memory / mirrored:.1f} bytes per mirrored origin "
                f"({mirrored} origins, {memory / 2**20:.1f} MiB; target < 120)"
            )
            ctx.redis.flushdb()
            started = time.perf_counter()
            count = rebuild(conn, ctx, "git", datetime.now(tz=UTC))
            elapsed = time.perf_counter() - started
            print(f"rebuild: {count} origins in {elapsed:.1f} s (target < 60 s)")
            started = time.perf_counter()
            import_listing(conn, ctx, lister, parsed(args), now)
            elapsed = time.perf_counter() - started
            print(f"re-listing unchanged: {args.origins / elapsed:,.0f} origins/s")


if __name__ == "__main__":
    main()
