"""Scheduling throughput and latency on 1,000,000 origins (issue 4 targets).

    python -m benchmarks.scheduling --origins 1000000 \
        --reference-python $HOME/swh-venv/bin/python

Loads the origins of benchmarks/scheduling_data.py (listing import, then
their visit history written to origin_visit_stats, then a mirror rebuild),
and measures:

- one weighted pop of 1,000 (Mirror.pop) with the reference's default
  weights, with 'auto' (seed 000's mixing) and with each pool alone:
  median and p95 over ``--pops`` pops, origins put back after each pop;
- sustained scheduling: schedule_step (pop + Postgres bookkeeping) plus the
  pipelined Dramatiq enqueue, then SchedulerLoop.step as the scheduler
  process runs it (queue emptied between steps, as workers would);
- enqueue_many against a loop of broker.enqueue() for the same messages;
- the query policies (Postgres candidates + Mirror.claim) for 1,000.

With ``--reference-python``, runs benchmarks/reference_scheduling.py under
that interpreter on the same PostgreSQL server, on the same origins, and
prints revisit's figures as ratios to the reference's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from actors.broker import make_broker
from actors.scheduler import SchedulerLoop
from app.db.connection import DictConnection, connect
from app.db.listings import register_lister
from app.db.policies import candidates
from app.domain.placement import Placement
from app.domain.policies import POOL_OF_POLICY, REFERENCE_DEFAULTS
from app.domain.queue_names import visit_queue
from app.inputs.listing import batches
from app.services.context import Context
from app.services.listing import import_listing
from app.services.mirror_sync import rebuild
from app.services.scheduling import VisitOrder, schedule_step
from app.settings import Settings
from benchmarks.common import bench_settings
from benchmarks.scheduling_data import VISIT_TYPE, origins
from queues.dramatiq_broker import enqueue_many, visit_message
from queues.mirror import Popped, Weights

POP_TARGET_MS = 10.0
STEP_TARGET_PER_S = 10_000.0
#: DESIGN.md: the reference selects 1,000 visits in 0.6-1.1 s per policy.
REFERENCE_DESIGN_S = 0.6
DEFAULT_WEIGHTS = [49.0, 49.0, 2.0, 0.0]


def now() -> datetime:
    return datetime.now(tz=UTC)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def spread(times: list[float]) -> tuple[float, float]:
    """Median and 95th percentile."""
    return statistics.median(times), statistics.quantiles(times, n=20)[18]


# -- loading -----------------------------------------------------------------


def listing(count: int) -> Iterator[str]:
    for o in origins(count):
        update = f', "last_update": "{o.last_update.isoformat()}"' if o.last_update else ""
        yield f'{{"url": "{o.url}", "visit_type": "{VISIT_TYPE}"{update}}}'


HISTORY_TABLE = """
create temp table history (url text, last_successful timestamptz, last_visit timestamptz,
  status visit_status, snapshot bytea, target timestamptz, last_scheduled timestamptz)
"""
APPLY_HISTORY = """
update origin_visit_stats st
set last_successful = h.last_successful, last_visit = h.last_visit,
    last_final_date = h.last_visit, last_visit_status = h.status, last_snapshot = h.snapshot,
    next_visit_queue_position = h.target, last_scheduled = h.last_scheduled,
    successive_visits = 1, failures_in_a_row = (h.status = 'failed')::int
from history h where st.url = h.url and st.visit_type = %(visit_type)s
"""


def history_rows(count: int) -> Iterator[tuple[Any, ...]]:
    """Rows of the history table: the last visit of each visited origin."""
    for o in origins(count):
        if o.last_visit is not None:
            status = "failed" if o.failed else "full"
            yield (
                o.url,
                o.last_successful,
                o.last_visit,
                status,
                o.snapshot,
                o.next_visit_queue_position,
                o.last_scheduled,
            )


def load(conn: DictConnection, ctx: Context, count: int) -> None:
    """List the origins, write their visit history, rebuild the mirror."""
    lister = register_lister(conn, "bench", "forge", None)
    parsed = batches(listing(count), 100_000, csv_format=False)
    report = import_listing(conn, ctx, lister, parsed, now)
    assert report.recorded == count and not report.refused
    write_history(conn, count)
    rebuild(conn, ctx, VISIT_TYPE, now())


@contextlib.contextmanager
def loaded(count: int) -> Iterator[tuple[Settings, Context, DictConnection]]:
    """Fresh servers holding ``count`` origins (``load``): settings, context, connection."""
    with bench_settings() as settings:
        ctx = Context.from_settings(settings)
        ctx.redis.flushdb()
        with connect(settings) as conn:
            load(conn, ctx, count)
            yield settings, ctx, conn


def write_history(conn: DictConnection, count: int) -> None:
    """Give the origins their visit history (COPY + one UPDATE), then analyze."""
    with conn.transaction():
        conn.execute(HISTORY_TABLE)
        with conn.cursor().copy("copy history from stdin") as copy:
            for row in history_rows(count):
                copy.write_row(row)
        conn.execute(APPLY_HISTORY, {"visit_type": VISIT_TYPE})
        conn.execute("drop table history")
    conn.execute("vacuum analyze origin_visit_stats")


# -- measurements ------------------------------------------------------------


def put_back(ctx: Context, popped: list[Popped]) -> None:
    """Return popped origins to their pools, as if they had never left."""
    ctx.mirror.place(
        VISIT_TYPE, [Placement(p.id, "pool", p.score, p.pool, p.score) for p in popped]
    )


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
    """CPU seconds the Redis server has used so far (user + system)."""
    info = ctx.redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def script_usec(ctx: Context) -> int:
    """Microseconds Redis has spent running scripts (EVALSHA) so far."""
    stats = ctx.redis.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("usec", 0))


def pop_latencies(
    ctx: Context, weights: Weights, pops: int, count: int, cpu: list[float] | None = None
) -> tuple[list[float], list[float]]:
    """Seconds per Mirror.pop of ``count`` as the caller sees it and inside Redis
    (and the caller's CPU seconds in ``cpu``); every pop must fill its batch."""
    cooldown_s = ctx.cooldowns.scheduled.total_seconds()
    times, server = [], []
    for _ in range(pops):
        before = script_usec(ctx)
        started, cpu_started = time.perf_counter(), time.process_time()
        result = ctx.mirror.pop(VISIT_TYPE, count, time.time(), cooldown_s, weights)
        times.append(time.perf_counter() - started)
        if cpu is not None:
            cpu.append(time.process_time() - cpu_started)
        server.append((script_usec(ctx) - before) / 1e6)
        assert len(result.popped) == count, len(result.popped)
        put_back(ctx, result.popped)
    return times, server


class Timed:
    """Wraps a callable and adds up the time spent in it."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.total_s = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.total_s += time.perf_counter() - started


def wal_bytes(conn: DictConnection) -> int:
    """Bytes of WAL the server has written so far."""
    row = conn.execute("select pg_current_wal_lsn() - '0/0'::pg_lsn as b").fetchone()
    return int(row["b"]) if row else 0


def stats_updates(conn: DictConnection, since: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """Updates of origin_visit_stats so far, and how many of them were HOT, minus ``since``."""
    conn.execute("select pg_stat_force_next_flush()")
    row = conn.execute(
        "select n_tup_upd as u, n_tup_hot_upd as h from pg_stat_user_tables"
        " where relname = 'origin_visit_stats'"
    ).fetchone()
    return (int(row["u"]) - since[0], int(row["h"]) - since[1]) if row else (0, 0)


def steps_breakdown(
    conn: DictConnection, ctx: Context, settings: Settings, batch: int, steps: int
) -> float:
    """schedule_step + enqueue_many ``steps`` times; print the parts; return visits/s."""
    broker = make_broker(settings)
    queue = visit_queue(VISIT_TYPE)
    pop = Timed(ctx.mirror.pop)
    ctx.mirror.pop = pop  # type: ignore[method-assign]
    step_s = enqueue_s = 0.0
    sent = 0
    cpu_started, redis_started = time.process_time(), redis_cpu_s(ctx)
    wal_started, hot_started = wal_bytes(conn), stats_updates(conn)
    backend = conn.execute("select pg_backend_pid() as pid").fetchone()
    postmaster = psutil.Process(int(backend["pid"]) if backend else 0).parent()
    assert postmaster is not None
    pg_started = postgres_cpu_s(postmaster)
    try:
        for _ in range(steps):
            started = time.perf_counter()
            result = schedule_step(conn, ctx, VISIT_TYPE, batch, now(), dict(REFERENCE_DEFAULTS))
            scheduled = time.perf_counter()
            enqueue_many(broker, [visit_message(queue, o, "express", 300.0) for o in result.orders])
            enqueue_s += time.perf_counter() - scheduled
            step_s += scheduled - started
            sent += len(result.orders)
            broker.flush(queue)  # the workers took them
    finally:
        ctx.mirror.pop = pop.function  # type: ignore[method-assign]
    cpu_s, redis_s = time.process_time() - cpu_started, redis_cpu_s(ctx) - redis_started
    pg_s = postgres_cpu_s(postmaster) - pg_started
    wal_b, (updated, hot) = wal_bytes(conn) - wal_started, stats_updates(conn, hot_started)
    total = step_s + enqueue_s
    print(
        f"  batch {batch}: {sent} visits in {total:.2f} s = {sent / total:,.0f} visits/s;"
        f" per step: pop {ms(pop.total_s / steps)},"
        f" Postgres bookkeeping {ms((step_s - pop.total_s) / steps)},"
        f" enqueue_many {ms(enqueue_s / steps)};"
        f" CPU per visit: client {cpu_s / sent * 1e6:.1f} µs, Redis {redis_s / sent * 1e6:.1f} µs,"
        f" PostgreSQL {pg_s / sent * 1e6:.1f} µs;"
        f" WAL per visit {wal_b / sent:,.0f} B; HOT {hot:,} of {updated:,} updates"
        f" (load {os.getloadavg()[0]:.2f})"
    )
    return sent / total


def scheduler_loop_rate(conn: DictConnection, settings: Settings, batch: int, steps: int) -> float:
    """SchedulerLoop.step, the scheduler process's iteration, with ``batch`` free slots."""
    with conn.transaction():
        conn.execute(
            "update visit_types set max_queue_length = %(n)s where name = %(vt)s",
            {"n": batch, "vt": VISIT_TYPE},
        )
    loop = SchedulerLoop(settings)
    queue = visit_queue(VISIT_TYPE)
    loop.step(now())  # reads the configuration once
    loop.broker.flush(queue)
    elapsed, sent = 0.0, 0
    for _ in range(steps):
        started = time.perf_counter()
        results = loop.step(now())
        elapsed += time.perf_counter() - started
        sent += sum(len(r.orders) for r in results)
        loop.broker.flush(queue)
    loop.db.close()
    rate = sent / elapsed
    print(
        f"  SchedulerLoop.step, {batch} free slots: {sent} visits in {elapsed:.2f} s"
        f" = {rate:,.0f} visits/s (target {STEP_TARGET_PER_S:,.0f})"
    )
    return rate


def enqueue_comparison(settings: Settings, count: int, repeat: int) -> None:
    """enqueue_many against broker.enqueue() in a loop, same messages."""
    broker = make_broker(settings)
    queue = visit_queue(VISIT_TYPE)
    order = VisitOrder(1, "https://forge.example/x.git", VISIT_TYPE, {}, 1, 1.0)
    messages = [visit_message(queue, order, "express", 300.0) for _ in range(count)]
    many, loop = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        enqueue_many(broker, messages)
        many.append(time.perf_counter() - started)
        broker.flush(queue)
        started = time.perf_counter()
        for message in messages:
            broker.enqueue(message)
        loop.append(time.perf_counter() - started)
        broker.flush(queue)
    m, s = statistics.median(many), statistics.median(loop)
    print(
        f"  enqueue {count}: enqueue_many {ms(m)} ({count / m:,.0f} msg/s),"
        f" broker.enqueue() loop {ms(s)} ({count / s:,.0f} msg/s): {s / m:.1f}x faster"
    )


def query_policy_times(
    conn: DictConnection, ctx: Context, policy: str, count: int, repeat: int
) -> float:
    """Median seconds of candidates + claim for ``count``; origins put back."""
    times, cands, claimed = [], [], []
    for _ in range(repeat):
        started = time.perf_counter()
        now = datetime.now(tz=UTC)
        ranked = next(
            candidates(
                conn,
                policy,
                VISIT_TYPE,
                count,
                rested_before=now - ctx.cooldowns.absolute,
                lost_before=now - ctx.cooldowns.scheduled,
            )
        )
        queried = time.perf_counter()
        got = ctx.mirror.claim(VISIT_TYPE, ranked, time.time(), count)
        done = time.perf_counter()
        times.append(done - started)
        cands.append(queried - started)
        claimed.append(len(got))
        put_back(ctx, got)
    median = statistics.median(times)
    print(
        f"  {policy} {count}: {ms(median)} median of {repeat}"
        f" (candidates query {ms(statistics.median(cands))}), claimed {min(claimed)}-{max(claimed)}"
    )
    return median


def stop_after_success_steps(conn: DictConnection, ctx: Context, batch: int, steps: int) -> None:
    """Full steps with only stop_after_success: who fills the batch, step after step."""
    policies = {"stop_after_success": 1.0}
    for i in range(steps):
        result = schedule_step(conn, ctx, VISIT_TYPE, batch, now(), policies)
        credited = Counter(o.policy for o in result.orders)
        print(
            f"  stop_after_success only, step {i + 1}: {len(result.orders)} of {batch},"
            f" credited {dict(credited)}"
        )


def other_figures(
    conn: DictConnection,
    ctx: Context,
    settings: Settings,
    args: argparse.Namespace,
    figures: dict[str, float],
) -> None:
    """Each pool popped alone, the query policies, enqueue_many against a loop."""
    for policy, pool in POOL_OF_POLICY.items():
        weights = [1.0 if p == pool else 0.0 for p in POOL_OF_POLICY.values()]
        median, p95 = spread(pop_latencies(ctx, weights, args.pops // 4, args.count)[0])
        figures[policy] = median
        print(f"  {pool} alone: median {ms(median)}, p95 {ms(p95)}")
    print(f"query policies ({args.count}: candidates + Mirror.claim):")
    for policy in ("oldest_scheduled_first", "stop_after_success"):
        figures[policy] = query_policy_times(conn, ctx, policy, args.count, 20)
    print("a query policy alone, step after step (no visit result arrives):")
    stop_after_success_steps(conn, ctx, args.count, 5)
    print("enqueue (pipelined vs one send per message):")
    for count in (1000, 5000):
        enqueue_comparison(settings, count, 5)


# -- the reference -----------------------------------------------------------


def run_reference(python: str, settings: Settings, count: int) -> dict[str, Any]:
    """benchmarks/reference_scheduling.py under ``python``, on this server."""
    script = Path(__file__).with_name("reference_scheduling.py")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "reference.json"
        subprocess.run(
            [
                python,
                str(script),
                "--database-url",
                settings.database_dsn(),
                "--origins",
                str(count),
                "--json",
                str(out),
            ],
            check=True,
        )
        figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def ratio(revisit_s: float, reference_s: float) -> str:
    times = reference_s / revisit_s
    return f"revisit/reference = {revisit_s / reference_s:.4f} ({times:,.0f}x faster)"


def compare(revisit: dict[str, float], figures: dict[str, Any]) -> None:
    """Print revisit's times against the reference's (full queries, no sampling)."""
    ref = {r["policy"]: r["median_s"] for r in figures["results"] if r["tablesample"] is None}
    print(f"\nagainst the reference (PostgreSQL {figures['server_version']}, same server):")
    default_mix = sum(ref[p] for p in REFERENCE_DEFAULTS)
    print(
        f"  1,000 by the default policies 49/49/2: revisit pop {ms(revisit['pop_default'])},"
        f" reference {ms(default_mix)} (three grab_next_visits): "
        + ratio(revisit["pop_default"], default_mix)
    )
    for policy in (*POOL_OF_POLICY, "oldest_scheduled_first", "stop_after_success"):
        if policy in revisit and policy in ref:
            print(
                f"  {policy}: revisit {ms(revisit[policy])}, reference {ms(ref[policy])}: "
                + ratio(revisit[policy], ref[policy])
            )
    ref_rate = 1000 / default_mix
    print(
        f"  sustained: revisit {revisit['rate']:,.0f} visits/s, reference at most"
        f" {ref_rate:,.0f} visits/s (selection alone): {revisit['rate'] / ref_rate:,.0f}x"
    )


# -- main --------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--pops", type=int, default=200)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--reference-python", help="a python with swh-scheduler installed")
    parser.add_argument(
        "--pop-and-steps",
        action="store_true",
        help="only the weighted pops, sustained scheduling and SchedulerLoop.step",
    )
    args = parser.parse_args()
    figures: dict[str, float] = {}
    with bench_settings() as settings:
        ctx = Context.from_settings(settings)
        ctx.redis.flushdb()
        with connect(settings) as conn:
            started = time.perf_counter()
            load(conn, ctx, args.origins)
            version = conn.execute("show server_version").fetchone()
            print(
                f"loaded {args.origins} origins in {time.perf_counter() - started:.0f} s"
                f" (PostgreSQL {version['server_version'] if version else '?'});"
                f" mirror: {ctx.mirror.sizes(VISIT_TYPE)}"
            )
            print(f"pop {args.count} (Mirror.pop), {args.pops} pops:")
            for label, weights in (
                ("reference default 49/49/2/0", DEFAULT_WEIGHTS),
                ("auto", "auto"),
            ):
                cpu: list[float] = []
                times, server = pop_latencies(ctx, weights, args.pops, args.count, cpu)
                median, p95 = spread(times)
                key = "pop_default" if weights == DEFAULT_WEIGHTS else "pop_auto"
                figures[key] = median
                print(
                    f"  {label}: median {ms(median)}, p95 {ms(p95)}"
                    f" (inside Redis: median {ms(statistics.median(server))};"
                    f" caller CPU: median {ms(statistics.median(cpu))};"
                    f" load {os.getloadavg()[0]:.2f})"
                    f" (target median < {POP_TARGET_MS:.0f} ms;"
                    f" {REFERENCE_DESIGN_S / median:,.0f}x faster than the reference's"
                    f" {REFERENCE_DESIGN_S} s in DESIGN.md)"
                )
            if not args.pop_and_steps:
                other_figures(conn, ctx, settings, args, figures)
            print("sustained scheduling (schedule_step + enqueue_many), default policies:")
            for batch in (1000, 5000):
                figures["rate"] = steps_breakdown(conn, ctx, settings, batch, args.steps)
            scheduler_loop_rate(conn, settings, 5000, args.steps)
        if args.reference_python:
            sys.stdout.flush()
            compare(figures, run_reference(args.reference_python, settings, args.origins))


if __name__ == "__main__":
    main()
