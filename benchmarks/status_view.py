"""What one refresh of ``revisit status`` costs, beside counting the same places
in PostgreSQL (the baseline: what a view reading the source of truth would pay).

    python -m benchmarks.status_view --origins 300000

Prints the median of 3 snapshots and of 3 baseline counts, measured in the
same run on the same data, their ratio, and the load average beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from app.cli.status import snapshot
from app.context import Context
from app.db.connection import DictConnection, connect
from app.db.listings import register_lister
from app.listing import import_listing
from app.listing_input import batches
from benchmarks.common import bench_settings, listing_lines

#: The baseline: where every origin of a visit type is, counted in PostgreSQL.
BASELINE_SQL = """
select count(*) filter (where last_snapshot is null) as never_succeeded,
       count(*) filter (where last_update > last_successful) as lagging,
       count(*) filter (where last_update is null) as no_last_update,
       count(*) filter (where last_scheduled > coalesce(last_final_date, 'epoch')) as in_flight,
       count(*) as listed
from origin_visit_stats where visit_type = 'git' and listed and not disabled_for_failures
"""


def median_ms(run: Callable[[], object]) -> float:
    """Median wall time of 3 runs, in ms."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--origins", type=int, default=300_000)
    args = parser.parse_args()
    with bench_settings() as settings:
        ctx = Context.from_settings(settings)
        ctx.redis.flushdb()
        with connect(settings) as conn:
            lister = register_lister(conn, "bench", "forge", None)
            lines = batches(listing_lines(args.origins), 50_000, csv_format=False)
            report = import_listing(conn, ctx, lister, lines, lambda: datetime.now(tz=UTC))
            assert report.recorded == args.origins and not report.refused
            conn.execute("analyze origin_visit_stats")

            def baseline(c: DictConnection = conn) -> object:
                return c.execute(BASELINE_SQL).fetchone()

            status_ms = median_ms(lambda: snapshot(conn, ctx, ["git"], datetime.now(tz=UTC)))
            baseline_ms = median_ms(baseline)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"origins: {args.origins:,}; load average: {load}")
    print(f"revisit status refresh: {status_ms:.1f} ms (median of 3)")
    print(f"baseline, counting in PostgreSQL: {baseline_ms:.1f} ms (median of 3)")
    print(f"ratio baseline / status: {baseline_ms / status_ms:.1f}x")


if __name__ == "__main__":
    main()
