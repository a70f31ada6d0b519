"""A real 3-master Redis Cluster on loopback ports, for the clustered mirror tests."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from app import embedded

MASTERS = 3


@contextlib.contextmanager
def redis_cluster(workdir: Path, masters: int = MASTERS) -> Iterator[str]:
    """Start ``masters`` cluster-enabled redis-servers, join them with
    ``redis-cli --cluster create`` (no replicas); yield the URL of the first."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise embedded.ServiceError("a Redis Cluster needs 'redis-cli' (apt-get install redis)")
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(
                embedded.redis_server(
                    workdir / f"node{i}",
                    extra_args=["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
                )
            )
            for i in range(masters)
        ]
        nodes = [url.removeprefix("redis://").removesuffix("/0") for url in urls]
        created = subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if created.returncode != 0:
            raise embedded.ServiceError(f"redis-cli --cluster create: {created.stdout[-500:]}")
        _wait_ok(urls)
        yield urls[0].removesuffix("/0")


def _wait_ok(urls: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = [redis.Redis.from_url(u).cluster("info") for u in urls]
        if all(s.get("cluster_state") == "ok" for s in states):
            return
        time.sleep(0.2)
    raise embedded.ServiceError(f"Redis Cluster not ok after {timeout_s:.0f}s")
