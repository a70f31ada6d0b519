"""Issue 13: scheduling steps with and without the index of oldest_scheduled_first.

    python -m benchmarks.hot_stamps --origins 1000000 --rounds 3

Loads ``--origins`` origins as benchmarks/scheduling.py does, then alternates
on the same servers, so both sides see the same load: the index built by
``set_policies`` (a visit type taking oldest_scheduled_first; the stamps are
not HOT) and dropped by it (the policy left; the stamps are HOT). Each side
of a round runs ``steps_breakdown`` (10 steps of 1,000: schedule_step with
the reference's weights, then enqueue_many), which prints the parts of a step,
the CPU per visit (this process, Redis, PostgreSQL), the WAL per visit and
the HOT count; this script adds how long building and dropping the index took
and the candidates query of oldest_scheduled_first with the index. The
1-minute load average is printed beside every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime

from app.context import Context
from app.db.connection import DictConnection
from app.db.policies import candidates, oldest_scheduled_index_ready, set_policies
from benchmarks.scheduling import loaded, steps_breakdown
from benchmarks.scheduling_data import VISIT_TYPE

WITH_INDEX = {"oldest_scheduled_first": 1.0}
WITHOUT_INDEX = {"age_optimal": 1.0}


def candidates_ms(conn: DictConnection, ctx: Context, repeat: int = 5) -> float:
    """Median milliseconds of oldest_scheduled_first's candidates query for 1,000."""
    times = []
    for _ in range(repeat):
        now = datetime.now(tz=UTC)
        started = time.perf_counter()
        candidates(
            conn,
            "oldest_scheduled_first",
            VISIT_TYPE,
            1000,
            now - ctx.cooldowns.absolute,
            now - ctx.cooldowns.scheduled,
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"index": [], "hot": []}
    with loaded(args.origins) as (settings, ctx, conn):
        for n in range(args.rounds):
            for label in ("index", "hot") if n % 2 == 0 else ("hot", "index"):
                started = time.perf_counter()
                set_policies(conn, VISIT_TYPE, WITH_INDEX if label == "index" else WITHOUT_INDEX)
                changed_s = time.perf_counter() - started
                assert oldest_scheduled_index_ready(conn) == (label == "index")
                extra = f", candidates of 1,000 {candidates_ms(conn, ctx):.1f} ms"
                print(
                    f"round {n + 1}, {label}: set_policies {changed_s:.2f} s{extra}"
                    f" (load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
                rates[label].append(steps_breakdown(conn, ctx, settings, 1000, args.steps))
    for label, runs in rates.items():
        print(f"{label}: median {statistics.median(runs):,.0f} visits/s ({runs})")


if __name__ == "__main__":
    main()
