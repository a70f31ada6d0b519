"""Issue 13: each change to scheduling and the rebuild, before and after in the same minute.

    python -m benchmarks.before_after --origins 1000000 --before 9991640 --json out.json

Loads ``--origins`` origins as benchmarks/scheduling.py does, then, on the
same servers and alternating old and new so both see the same load:

- pop.lua of revision ``--before`` against the current one (Mirror.pop of
  1,000, default weights 49/49/2/0, origins put back after each pop): median
  time from the Python caller and inside Redis;
- (place.lua 'stage' of ``--before`` against the current one was compared
  here until the rebuild stopped running place.lua: benchmarks/rebuild.py
  now measures the rebuild). (The bookkeeping of 1,000 picks in parts of 250
  was measured here too, then reverted: no pair showed a gain.)

Then the figures of the current code, each the median of ``--runs`` runs:
pop of 1,000 (median of 50 pops per run), sustained scheduling
(schedule_step + enqueue_many, 10 steps of 1,000 per run) and the mirror
rebuild. The 1-minute load average is printed beside every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import queues.mirror as mirror
from app.context import Context
from app.db.connection import DictConnection
from app.mirror_sync import rebuild
from benchmarks.scheduling import (
    DEFAULT_WEIGHTS,
    loaded,
    now,
    pop_latencies,
    steps_breakdown,
)
from benchmarks.scheduling_data import VISIT_TYPE

ROOT = Path(__file__).resolve().parent.parent


def load_average() -> float:
    return os.getloadavg()[0]


def old_script(revision: str, name: str) -> str:
    """A Lua script as it was at ``revision`` (git)."""
    path = f"queues/lua/{name}.lua"
    return subprocess.run(
        ["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def _old_reply(flat: list[Any]) -> list[mirror.Popped]:
    """The reply of the former pop.lua: id, pool index, score per origin."""
    return [
        mirror.Popped(int(flat[i]), mirror.POOLS[int(flat[i + 1]) - 1], float(flat[i + 2]))
        for i in range(0, len(flat), 3)
    ]


def pops(ctx: Context, before: str, rounds: int) -> dict[str, float]:
    """Caller and in-Redis medians of the old and the current pop.lua, alternating."""
    current, parse = ctx.mirror._pop, mirror._popped_by_pool
    old = ctx.mirror.client.register_script(old_script(before, "pop"))
    times: dict[str, list[float]] = {"before": [], "after": [], "before_s": [], "after_s": []}
    try:
        for _ in range(rounds):
            for label, script, reply in (("before", old, _old_reply), ("after", current, parse)):
                ctx.mirror._pop, mirror._popped_by_pool = script, reply  # type: ignore[assignment]
                caller, server = pop_latencies(ctx, DEFAULT_WEIGHTS, 5, 1000)
                times[label] += caller
                times[f"{label}_s"] += server
    finally:
        ctx.mirror._pop, mirror._popped_by_pool = current, parse  # type: ignore[method-assign]
    return {f"pop_{k}_ms": statistics.median(v) * 1000 for k, v in times.items()}


def current_figures(conn: DictConnection, ctx: Context, settings: Any, runs: int) -> dict[str, Any]:
    """Pop, scheduling rate and rebuild of the current code: every run, and the loads."""
    out: dict[str, Any] = {"pop_ms": [], "rate": [], "rebuild_s": [], "load": []}
    for _ in range(runs):
        out["load"].append(load_average())
        caller, _server = pop_latencies(ctx, DEFAULT_WEIGHTS, 50, 1000)
        out["pop_ms"].append(statistics.median(caller) * 1000)
        out["rate"].append(steps_breakdown(conn, ctx, settings, 1000, 10))
        started = time.perf_counter()
        rebuild(conn, ctx, VISIT_TYPE, now())
        out["rebuild_s"].append(time.perf_counter() - started)
        out["load"][-1] = max(out["load"][-1], load_average())
    return out


def measure(
    conn: DictConnection, ctx: Context, settings: Any, before: str, runs: int
) -> dict[str, Any]:
    """Every before/after pair, then the current figures."""
    figures: dict[str, Any] = {"load_before_pairs": load_average()}
    figures |= pops(ctx, before, 10)
    figures["load_after_pairs"] = load_average()
    for name, value in figures.items():
        print(f"{name}: {value:,.2f}", flush=True)
    runs_out = current_figures(conn, ctx, settings, runs)
    for name in ("pop_ms", "rate", "rebuild_s"):
        values = runs_out[name]
        print(
            f"{name}: median {statistics.median(values):,.2f}"
            f" ({' / '.join(f'{v:,.2f}' for v in values)});"
            f" load {' / '.join(f'{v:.1f}' for v in runs_out['load'])}",
            flush=True,
        )
    return figures | {"runs": runs_out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--before", default="9991640", help="git revision of the former code")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    with loaded(args.origins) as (settings, ctx, conn):
        figures = measure(conn, ctx, settings, args.before, args.runs)
    if args.json:
        Path(args.json).write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
