"""Issue 13: the version trigger's PL/pgSQL call against the bump in the statement.

    python -m benchmarks.version_trigger --origins 1000000 --runs 3

Loads ``--origins`` origins as benchmarks/scheduling.py does, then alternates
on the same servers, so both see the same load:

- before: the trigger of migration 12 (a PL/pgSQL call for every updated
  row) and mark_scheduled without ``version = st.version + 1``;
- after: migration 16's trigger (skipped when the statement bumped the
  version itself) and the current mark_scheduled.

Each run is 10 scheduling steps of 1,000 (schedule_step + enqueue_many, the
reference's weights, as ``steps_breakdown``); it prints the visits/s, the
time in mark_scheduled per step, and the CPU per visit of this process and
of the PostgreSQL server (postmaster and children), which a loaded machine
disturbs less than wall time. The 1-minute load average is printed beside
every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from importlib import resources
from typing import Any

import psutil

import app.db.scheduling as db_scheduling
import app.scheduling as scheduling
from app.context import Context
from app.db.connection import DictConnection
from app.db.queries import query
from benchmarks.journal_steps import postgres_cpu_s
from benchmarks.scheduling import Timed, loaded, steps_breakdown

BUMP = ", version = st.version + 1"
OLD_TRIGGER = """
drop trigger origin_visit_stats_version on origin_visit_stats;
create trigger origin_visit_stats_version before update on origin_visit_stats
  for each row execute function origin_visit_stats_bump_version();
"""


MIGRATION = "0016_version_bump_in_statements.sql"


def new_trigger() -> str:
    return (resources.files("sql") / "migrations" / MIGRATION).read_text()


def use(conn: DictConnection, label: str) -> None:
    """Install the trigger and the mark_scheduled text of ``label``."""
    current = query("mark_scheduled")
    assert BUMP in current
    text = current if label == "after" else current.replace(BUMP, "")
    with conn.transaction():
        conn.execute((new_trigger() if label == "after" else OLD_TRIGGER).encode())
    db_scheduling.query = lambda name: text if name == "mark_scheduled" else query(name)  # type: ignore[assignment]


def run(conn: DictConnection, ctx: Context, settings: Any, label: str) -> dict[str, float]:
    """One run of 10 steps of 1,000 with the variant ``label``."""
    use(conn, label)
    mark = Timed(db_scheduling.mark_scheduled)
    scheduling.mark_scheduled = mark  # type: ignore[assignment]
    postmaster = psutil.Process(conn.info.backend_pid).parent()
    try:
        steps_breakdown(conn, ctx, settings, 1000, 1)  # warm
        mark.total_s = 0.0
        pg0, cpu0, load0 = postgres_cpu_s(postmaster), time.process_time(), os.getloadavg()[0]
        rate = steps_breakdown(conn, ctx, settings, 1000, 10)
        pg, cpu = postgres_cpu_s(postmaster) - pg0, time.process_time() - cpu0
    finally:
        scheduling.mark_scheduled = mark.function  # type: ignore[assignment]
    return {
        "rate": rate,
        "mark_ms": mark.total_s * 100,  # 10 steps: ms per step
        "client_us": cpu * 100,  # 10,000 visits: µs per visit
        "postgres_us": pg * 100,
        "load": max(load0, os.getloadavg()[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with loaded(args.origins) as (settings, ctx, conn):
        out: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for i in range(args.runs):
            for label in ("before", "after") if i % 2 == 0 else ("after", "before"):
                out[label].append(run(conn, ctx, settings, label))
                print(f"{label} run {len(out[label])}: {out[label][-1]}", flush=True)
        use(conn, "after")
    for label, runs in out.items():
        parts = []
        for key in ("rate", "mark_ms", "client_us", "postgres_us"):
            values = [r[key] for r in runs]
            each = " / ".join(f"{v:,.1f}" for v in values)
            parts.append(f"{key} {statistics.median(values):,.1f} ({each})")
        loads = " / ".join(f"{r['load']:.1f}" for r in runs)
        print(f"{label}: {'; '.join(parts)}; load {loads}")


if __name__ == "__main__":
    main()
