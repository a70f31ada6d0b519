"""The mirror rebuild, in one process and split over several, alternated in one run.

    python -m benchmarks.rebuild --origins 1000000 --processes 3 --runs 3

On fresh embedded services (or the REVISIT_* addresses): imports ``--origins``
git origins with their visit history (as benchmarks/growth.py), then rebuilds
the mirror from an empty Redis ``--runs`` times each way, alternating one
process (the baseline) and ``--processes``. Prints every run with the load
average, the CPU of the calling process and of Redis, then the medians and
the ratio of the medians. Every rebuild must give the same mirror.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from app.context import Context
from app.db.connection import connect
from app.mirror_sync import rebuild
from benchmarks.common import bench_settings
from benchmarks.growth import flush, timed_import
from benchmarks.scheduling import now, redis_cpu_s, write_history
from benchmarks.scheduling_data import VISIT_TYPE


def load() -> float:
    return os.getloadavg()[0]


def own_cpu_s() -> float:
    """CPU seconds of this process and of its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times: dict[int, list[float]] = {1: [], args.processes: []}
    mirrors: set[tuple[tuple[str, int], ...]] = set()
    with bench_settings() as settings:
        ctx = Context.from_settings(settings)
        ctx.redis.flushdb()
        with connect(settings) as conn:
            timed_import(conn, ctx, settings, args.origins)
            write_history(conn, args.origins)
            for run in range(args.runs):
                for processes in (1, args.processes):
                    flush(ctx)
                    load_before, cpu, redis_cpu = load(), own_cpu_s(), redis_cpu_s(ctx)
                    started = time.perf_counter()
                    count = rebuild(conn, ctx, VISIT_TYPE, now(), processes=processes)
                    elapsed = time.perf_counter() - started
                    times[processes].append(elapsed)
                    mirrors.add(tuple(sorted(ctx.mirror.sizes(VISIT_TYPE).items())))
                    print(
                        f"run {run + 1}, {processes} process(es): {count:,} origins in "
                        f"{elapsed:.2f} s; CPU: callers {own_cpu_s() - cpu:.1f} s, Redis "
                        f"{redis_cpu_s(ctx) - redis_cpu:.1f} s; load {load_before:.2f}",
                        flush=True,
                    )
    one, many = statistics.median(times[1]), statistics.median(times[args.processes])
    print(f"median, 1 process: {one:.2f} s")
    print(f"median, {args.processes} processes: {many:.2f} s ({one / many:.2f}x; target <= 8 s)")
    if len(mirrors) != 1:
        raise SystemExit(f"the rebuilds gave different mirrors: {sorted(mirrors)}")


if __name__ == "__main__":
    main()
