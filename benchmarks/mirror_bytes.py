"""The mirror's Redis bytes per origin, by the rebuild path alone.

    .venv/bin/python -m benchmarks.mirror_bytes --origins 1000000

On a Redis of its own: ``used_memory`` before and after ``Mirror``'s rebuild
(``begin_rebuild``, ``stage``, ``end_bulk``, ``finish_rebuild``) of made-up
placements with the pool shares of the 1M growth run (20 / 15 / 50 / 15 %),
consecutive ids and scores with microseconds (as ``epoch_s`` gives; the worst
case for a listpack); then the same after placing a tenth of them again
(``Mirror.place``, new scores: the buckets split as placements arrive). It
gives the growth run's figure without the hour of a 10M import, and how much
the rebuild grew this process's peak memory (the placements are made as the
rebuild reads them, so that is the rebuild's own).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from app.devtools.embedded import redis_server
from app.domain.placement import Placement, PoolName
from queues.mirror import Mirror

VISIT_TYPE = "git"
NOW = 1_788_000_000.0
#: The pools' shares of the 1M growth run.
SHARES: list[tuple[PoolName, float]] = [
    ("never_visited", 0.20),
    ("lagging", 0.15),
    ("no_last_update", 0.50),
    ("up_to_date", 0.15),
]


def placements(count: int, seed: int, version: int, every: int = 1) -> Iterator[Placement]:
    """Origins 1..count (every ``every``-th) in pools by ``SHARES``, random scores."""
    rng = random.Random(seed)
    bounds, total = [], 0.0
    for pool, share in SHARES:
        total += share
        bounds.append((total * count, pool))
    k = 0
    for origin in range(1, count + 1, every):
        while origin > bounds[k][0] and k < len(bounds) - 1:
            k += 1
        score = round(NOW + rng.uniform(-3e7, 3e7), 6)
        yield Placement(origin, "pool", score, bounds[k][1], score, version)


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work, redis_server(Path(work)) as url:
        client = redis.Redis.from_url(url)
        mirror = Mirror(client, "revisit")
        before = used(client)
        rss_before = peak_rss_mb()
        started = time.perf_counter()
        token = mirror.begin_rebuild(VISIT_TYPE)
        mirror.stage(VISIT_TYPE, placements(args.origins, 1, 1))
        mirror.end_bulk(VISIT_TYPE, token)
        held = mirror.finish_rebuild(VISIT_TYPE, token)
        rebuilt_s = time.perf_counter() - started
        rebuild_mb = peak_rss_mb() - rss_before
        rebuilt = used(client)
        started = time.perf_counter()
        again = list(placements(args.origins, 2, 2, every=10))
        mirror.place(VISIT_TYPE, again)
        placed_us = (time.perf_counter() - started) / len(again) * 1e6
        after = used(client)
        print(
            f"{held:,} origins: rebuilt in {rebuilt_s:.1f} s"
            f" (its peak Python memory +{rebuild_mb:.0f} MB),"
            f" {(rebuilt - before) / args.origins:.1f} B/origin;"
            f" after placing {len(again):,} again ({placed_us:.1f} us each):"
            f" {(after - before) / args.origins:.1f} B/origin;"
            f" load {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
