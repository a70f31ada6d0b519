"""The Redis side of one scheduling step of 1,000, on a mirror of 1,000,000 origins
written straight into Redis (no PostgreSQL load: seconds, not minutes).

    python -m benchmarks.redis_steps --origins 1000000 --rounds 30

Fills the pools as benchmarks/scheduling_data.py's origins fill them (200k
never visited, 150k lagging, 500k without last_update, 150k up to date;
random scores), then, ``--rounds`` times:

- Mirror.pop of 1,000 with the reference's weights 49/49/2/0: time from the
  caller, inside Redis (EVALSHA's ``usec``) and the caller's CPU;
- Mirror.place of those 1,000 in flight at a new version (what
  ``confirm_scheduled`` sends after ``mark_scheduled``): from the caller and
  inside Redis; then they go back to their pools;
- 1,000 visit messages built and sent with ``enqueue_many`` (the queue then
  emptied): from the caller and the caller's CPU.

Run it in two trees to compare them; each figure is a median over the rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from actors.broker import make_broker
from app.context import Context
from app.domain.placement import Placement
from app.queue_names import visit_queue
from app.scheduler_step import Tuning
from app.scheduling import VisitOrder
from benchmarks.common import bench_settings
from queues.dramatiq_broker import enqueue_many, visit_message

VISIT_TYPE = "git"
SHARE = {"never_visited": 0.2, "lagging": 0.15, "no_last_update": 0.5, "up_to_date": 0.15}
WEIGHTS = [49.0, 49.0, 2.0, 0.0]


def fill(ctx: Context, origins: int, seed: int = 13) -> None:
    """Write ``origins`` origins into the pools (ZADD, 20,000 per command)."""
    rng = random.Random(seed)
    keys = ctx.mirror.keys(VISIT_TYPE)
    next_id = 1
    for pool, share in SHARE.items():
        members: dict[str, float] = {}
        for _ in range(int(origins * share)):
            score = 1.735e9 + rng.random() * 3e7
            if pool == "lagging" and rng.random() < 0.3:
                score = -rng.random() * 1e6  # a change reported lag seconds after the visit
            members[str(next_id)] = score
            next_id += 1
            if len(members) == 20_000:
                ctx.mirror.client.zadd(keys.pool(pool), members)
                members = {}
        if members:
            ctx.mirror.client.zadd(keys.pool(pool), members)
    ctx.mirror.client.hset(keys.meta, "rebuilt_at", str(time.time()))


def script_usec(ctx: Context) -> int:
    """Microseconds Redis has spent in EVALSHA so far."""
    return int(ctx.mirror.client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))


def timed(ctx: Context, call: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """``call()``'s result, wall seconds, seconds inside Redis scripts, CPU seconds."""
    usec, cpu, wall = script_usec(ctx), time.process_time(), time.perf_counter()
    result = call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return result, wall, (script_usec(ctx) - usec) / 1e6, cpu


def send(broker: Any, queue: str, orders: list[VisitOrder], tuning: Tuning) -> None:
    """The scheduler's enqueue of one step: a message per order, one enqueue_many."""
    enqueue_many(broker, [visit_message(queue, o, "express", 300.0, tuning) for o in orders])


def rounds(ctx: Context, settings: Any, count: int, runs: int) -> dict[str, list[float]]:
    """Pop, confirm and enqueue ``count`` origins ``runs`` times; seconds of each part."""
    broker = make_broker(settings)
    queue = visit_queue(VISIT_TYPE)
    tuning = Tuning(3600.0, 3, 60.0)
    cooldown_s = ctx.cooldowns.scheduled.total_seconds()
    figures: dict[str, list[float]] = {}

    def note(**values: float) -> None:
        for name, value in values.items():
            figures.setdefault(name, []).append(value)

    for version in range(2, 2 * runs + 2, 2):
        popped, wall, redis_s, cpu = timed(
            ctx, lambda: ctx.mirror.pop(VISIT_TYPE, count, time.time(), cooldown_s, WEIGHTS).popped
        )
        assert len(popped) == count
        note(pop=wall, pop_redis=redis_s, pop_cpu=cpu)
        now_s = time.time()
        confirm = [Placement(p.id, "inflight", now_s, p.pool, p.score, version) for p in popped]
        _, wall, redis_s, _ = timed(ctx, partial(ctx.mirror.place, VISIT_TYPE, confirm))
        note(confirm=wall, confirm_redis=redis_s)
        back = [Placement(p.id, "pool", p.score, p.pool, p.score, version + 1) for p in popped]
        ctx.mirror.place(VISIT_TYPE, back)
        orders = [
            VisitOrder(p.id, f"https://forge.example/g/{p.id}.git", VISIT_TYPE, {}, 1, now_s)
            for p in popped
        ]
        _, wall, _, cpu = timed(ctx, partial(send, broker, queue, orders, tuning))
        note(enqueue=wall, enqueue_cpu=cpu)
        broker.flush(queue)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with bench_settings() as settings:
        ctx = Context.from_settings(settings)
        ctx.redis.flushdb()
        fill(ctx, args.origins)
        figures = rounds(ctx, settings, args.count, args.rounds)
    medians = {name: statistics.median(values) * 1000 for name, values in figures.items()}
    print(
        f"{args.count} of {args.origins:,} origins, medians of {args.rounds} rounds"
        f" (load {os.getloadavg()[0]:.2f}):\n"
        f"  pop: {medians['pop']:.2f} ms from the caller, {medians['pop_redis']:.2f} ms"
        f" inside Redis, caller CPU {medians['pop_cpu']:.2f} ms\n"
        f"  confirm in flight (place): {medians['confirm']:.2f} ms from the caller,"
        f" {medians['confirm_redis']:.2f} ms inside Redis\n"
        f"  enqueue (visit_message + enqueue_many): {medians['enqueue']:.2f} ms,"
        f" caller CPU {medians['enqueue_cpu']:.2f} ms"
    )


if __name__ == "__main__":
    main()
