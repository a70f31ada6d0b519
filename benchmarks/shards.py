"""Pop latency and scheduling rate of a sharded mirror on a 3-master Redis Cluster (issue 14).

    python -m benchmarks.shards --origins 200000 --shards 1 3 6

Loads the origins of benchmarks/scheduling_data.py into PostgreSQL once, then
for each shard count (``REVISIT_MIRROR_SHARDS``) rebuilds git's mirror on a
Redis Cluster started for the run (3 masters on loopback ports; the broker
on its own Redis) and measures, three runs each:

- pop latency: one weighted pop of ``--batch`` origins (``Mirror.pop``: one
  atomic pop per shard, counts in proportion), origins put back after each,
  median over ``--pops`` pops;
- scheduling rate: consecutive ``schedule_step`` calls of ``--batch`` (pop,
  Postgres bookkeeping, the in-flight confirmation), origins per second;
  the origins it sends are given back to their pools before the next run.

Prints the median of the three runs with the load average beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr

from app.context import Context
from app.db.connection import DictConnection, connect
from app.devtools import embedded
from app.domain.placement import Placement
from app.mirror_sync import rebuild
from app.scheduling import schedule_step
from app.settings import Settings
from benchmarks.common import bench_settings
from benchmarks.scheduling import DEFAULT_WEIGHTS, load
from benchmarks.scheduling_data import VISIT_TYPE

RUNS = 3


def pop_latency_s(ctx: Context, batch: int, pops: int) -> float:
    """Median time of one pop of ``batch``, the origins put back after each."""
    times = []
    cooldown_s = ctx.cooldowns.scheduled.total_seconds()
    for _ in range(pops):
        started = time.perf_counter()
        result = ctx.mirror.pop(VISIT_TYPE, batch, time.time(), cooldown_s, DEFAULT_WEIGHTS)
        times.append(time.perf_counter() - started)
        back = [Placement(p.id, "pool", p.score, p.pool, p.score) for p in result.popped]
        ctx.mirror.place(VISIT_TYPE, back)
    return statistics.median(times)


def scheduling_rate(conn: DictConnection, ctx: Context, batch: int, steps: int) -> float:
    """Origins per second scheduled by ``steps`` consecutive scheduling steps."""
    started = time.perf_counter()
    sent = 0
    for _ in range(steps):
        sent += len(schedule_step(conn, ctx, VISIT_TYPE, batch, datetime.now(tz=UTC)).orders)
    return sent / (time.perf_counter() - started)


def give_back(conn: DictConnection, since: datetime) -> None:
    """Forget the visits a run sent, so each run starts from the same stats."""
    conn.execute(
        "update origin_visit_stats set last_scheduled = null where last_scheduled >= %s", [since]
    )
    conn.commit()


def measure(settings: Settings, shards: int, args: argparse.Namespace) -> dict[str, float]:
    """Three runs on ``shards`` shards: medians of pop latency and scheduling rate."""
    ctx = Context.from_settings(settings.model_copy(update={"mirror_shards": {"git": shards}}))
    latencies, rates, loads = [], [], []
    with connect(settings) as conn:
        for _ in range(RUNS):
            since = datetime.now(tz=UTC)
            ctx.mirror.client.flushdb()
            rebuild(conn, ctx, VISIT_TYPE, since)
            loads.append(os.getloadavg()[0])
            latencies.append(pop_latency_s(ctx, args.batch, args.pops))
            rates.append(scheduling_rate(conn, ctx, args.batch, args.steps))
            give_back(conn, since)
    return {
        "pop_ms": statistics.median(latencies) * 1000,
        "rate": statistics.median(rates),
        "load": statistics.median(loads),
        "runs_pop_ms": [x * 1000 for x in latencies],  # type: ignore[dict-item]
        "runs_rate": rates,  # type: ignore[dict-item]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--origins", type=int, default=200_000)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 3, 6])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--pops", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        cluster = stack.enter_context(embedded.redis_cluster(workdir))
        base = stack.enter_context(bench_settings())
        settings = base.model_copy(
            update={
                "redis_url": SecretStr(cluster),
                "redis_cluster": True,
                "broker_redis_url": base.redis_url,
            }
        )
        with connect(settings) as conn:
            load(conn, Context.from_settings(settings), args.origins)
        print(f"{args.origins:,} origins, batches of {args.batch}, {RUNS} runs each")
        print("| shards | pop of 1,000 (median ms) | runs | scheduled/s (median) | runs | load |")
        print("|---|---|---|---|---|---|")
        for shards in args.shards:
            m = measure(settings, shards, args)
            pops = " / ".join(f"{x:.1f}" for x in m["runs_pop_ms"])  # type: ignore[attr-defined]
            rates = " / ".join(f"{x:,.0f}" for x in m["runs_rate"])  # type: ignore[attr-defined]
            print(
                f"| {shards} | {m['pop_ms']:.1f} | {pops} | {m['rate']:,.0f} | {rates} "
                f"| {m['load']:.1f} |"
            )


if __name__ == "__main__":
    main()
