"""Redis memory per origin of the mirror, with and without the per-origin version
that makes placements order-safe (issue 14).

    python -m benchmarks.version_memory --origins 200000

Adds the origins to one pool of a throwaway Redis (``Mirror.add_new``), once
without versions and once with, and prints ``INFO memory``'s growth per origin.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import redis

from app.devtools import embedded
from app.domain.placement import Placement
from queues.mirror import Mirror


def bytes_per_origin(client: redis.Redis, origins: int, version: int) -> float:
    """Memory the mirror grows by per origin, all in one pool."""
    client.flushdb()
    before = int(client.info("memory")["used_memory"])
    placements = [
        Placement(i, "pool", 1.7e9 + i, "up_to_date", 1.7e9 + i, version)
        for i in range(1, origins + 1)
    ]
    Mirror(client, "revisit").add_new("git", placements)
    return (int(client.info("memory")["used_memory"]) - before) / origins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--origins", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, embedded.redis_server(Path(workdir)) as url:
        client = redis.Redis.from_url(url)
        without = bytes_per_origin(client, args.origins, 0)
        with_version = bytes_per_origin(client, args.origins, 7)
    print(
        f"{args.origins:,} origins: {without:.1f} B/origin without versions, "
        f"{with_version:.1f} B/origin with"
    )


if __name__ == "__main__":
    main()
