"""The mirror rebuild from PostgreSQL into an empty Redis.

    python -m benchmarks.rebuild --origins 1000000 --runs 3

On fresh embedded services (or the REVISIT_* addresses): imports ``--origins``
git origins with their visit history (as benchmarks/growth.py), then rebuilds
the mirror from an empty Redis ``--runs`` times. Prints every run with the
load average, the CPU of this process and of Redis, then the median. Every
rebuild must give the same mirror.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from app.db.connection import connect
from app.services.context import Context
from app.services.mirror_sync import rebuild
from benchmarks.common import bench_settings
from benchmarks.growth import flush, timed_import
from benchmarks.scheduling import now, redis_cpu_s, write_history
from benchmarks.scheduling_data import VISIT_TYPE


def load() -> float:
    return os.getloadavg()[0]


def own_cpu_s() -> float:
    """CPU seconds of this process."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times: list[float] = []
    mirrors: set[tuple[tuple[str, int], ...]] = set()
    with bench_settings() as settings:
        ctx = Context.from_settings(settings)
        ctx.redis.flushdb()
        with connect(settings) as conn:
            timed_import(conn, ctx, settings, args.origins)
            write_history(conn, args.origins)
            for run in range(args.runs):
                flush(ctx)
                load_before, cpu, redis_cpu = load(), own_cpu_s(), redis_cpu_s(ctx)
                started = time.perf_counter()
                count = rebuild(conn, ctx, VISIT_TYPE, now())
                elapsed = time.perf_counter() - started
                times.append(elapsed)
                mirrors.add(tuple(sorted(ctx.mirror.sizes(VISIT_TYPE).items())))
                print(
                    f"run {run + 1}: {count:,} origins in {elapsed:.2f} s; CPU: this process "
                    f"{own_cpu_s() - cpu:.1f} s, Redis {redis_cpu_s(ctx) - redis_cpu:.1f} s; "
                    f"load {load_before:.2f}",
                    flush=True,
                )
    print(f"median: {statistics.median(times):.2f} s (target <= 8 s)")
    if len(mirrors) != 1:
        raise SystemExit(f"the rebuilds gave different mirrors: {sorted(mirrors)}")


if __name__ == "__main__":
    main()
