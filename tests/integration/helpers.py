"""Shared steps of the integration tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dramatiq
from confluent_kafka import Consumer, Message

from actors.scheduler import SchedulerLoop
from app.client import RevisitClient
from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.domain.queue_names import API_QUEUE, visit_queue
from app.inputs.listing import ListedOriginIn
from app.kafka.client import StatusPublisher
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.settings import Settings
from queues.keys import DramatiqQueueKeys
from queues.mirror import Mirror
from tests.processes import running, wait_for


def list_origins(
    conn: DictConnection,
    ctx: Context,
    urls: list[str],
    visit_type: str = "git",
    now: datetime | None = None,
) -> None:
    """Register a test lister and record ``urls`` as its origins."""
    lister_id = register_lister(conn, "test", "forge", None)
    rows = [(i + 1, ListedOriginIn(url=u, visit_type=visit_type)) for i, u in enumerate(urls)]
    record_listed_origins(conn, ctx, lister_id, rows, now or datetime.now(tz=UTC))


def free_port() -> int:
    """A loopback port no one listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stats_by_url(conn: DictConnection) -> dict[str, dict[str, object]]:
    """Every stats row, by URL, without its ``version`` (every write bumps it, even
    one that changes nothing else, such as a replayed status)."""
    rows = conn.execute("select * from origin_visit_stats").fetchall()
    return {str(r["url"]): {k: v for k, v in r.items() if k != "version"} for r in rows}


def cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``revisit ARGS`` as a user would (the test's REVISIT_* environment, and ``env``)."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        input=stdin,
        env={**os.environ, **env} if env else None,
        capture_output=True,
        text=True,
        check=False,
    )


def run_visits(
    tmp_path: Path,
    env: dict[str, str],
    until: Callable[[], bool],
    what: str,
    timeout_s: float = 60,
    threads: int = 4,
) -> Path:
    """Run the scheduler, a worker pool of every lane and the journal client as
    processes until ``until()``; return the folder of their logs."""
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "scheduler": ["revisit", "scheduler"],
        "worker": ["revisit", "worker", "--lane", "all", "--threads", str(threads)],
        "journal": ["revisit", "journal"],
    }
    with running(procs, env, logs):
        wait_for(until, timeout_s, what, logs)
    return logs


def send_to_api(settings: Settings, actor: str, payloads: list[dict[str, Any]]) -> None:
    """Enqueue ``payloads`` for the API ``actor`` as any service would, unchecked
    (bypassing the client's own validation)."""
    broker = RevisitClient.from_settings(settings).broker
    for payload in payloads:
        broker.enqueue(
            dramatiq.Message(
                queue_name=API_QUEUE,
                actor_name=actor,
                args=(),
                kwargs={"payload": payload},
                options={},
            )
        )


def journal_dead_letters(settings: Settings, count: int) -> list[Message]:
    """The first ``count`` messages of the journal's dead-letter topic."""
    dlq = Consumer(
        {
            "bootstrap.servers": settings.kafka_brokers,
            "group.id": "dlq-reader",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 1000,
        }
    )
    dlq.subscribe([settings.dead_letter_topic])
    found: list[Message] = []

    def enough() -> bool:
        found.extend(m for m in dlq.consume(10, 0.5) if not m.error())
        return len(found) >= count

    wait_for(enough, 20, "the dead letters")
    dlq.close()
    return found


def recurrent_backlog(
    settings: Settings, conn: DictConnection, ctx: Context, origins: int
) -> tuple[SchedulerLoop, DramatiqQueueKeys, int]:
    """List ``origins`` git origins and let one scheduler step fill the express
    queue with them; the loop, that queue's keys and how many messages it holds."""
    list_origins(conn, ctx, [f"https://backlog.example/{i}" for i in range(origins)])
    loop = SchedulerLoop(settings)
    loop.step(datetime.now(tz=UTC))
    express = DramatiqQueueKeys(loop.broker.namespace, visit_queue("git"))
    backlog = loop.broker.client.hlen(express.messages)
    assert backlog > 0
    return loop, express, int(backlog)


def serve_requests(tmp_path: Path, until: Callable[[], bool], what: str) -> None:
    """Run one priority-lane worker (a thread) and the journal client until ``until()``."""
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "priority": ["revisit", "worker", "--lane", "priority", "--threads", "1"],
        "journal": ["revisit", "journal"],
    }
    with running(procs, {}, logs):
        wait_for(until, 90, what, logs)


class WatchedPublisher(StatusPublisher):
    """A worker's publisher, which also remembers the statuses the broker acknowledged."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.statuses: list[str] = []

    def publish(self, origin: str, visit_type: str, visit: int, status: str, *rest: Any) -> None:
        super().publish(origin, visit_type, visit, status, *rest)
        self.statuses.append(status)


def pool_buckets(mirror: Mirror, visit_type: str, pool: str, shard: int = 0) -> list[str]:
    """The bucket keys of one pool of the live mirror, lowest scores first."""
    keys = mirror.keys(visit_type, shard)
    generation = mirror.generation(keys)
    index: Any = mirror.client.zrange(keys.pool_index(generation, pool), 0, -1)
    return [keys.pool_bucket(generation, pool, b) for b in index]


def pool_members(
    mirror: Mirror, visit_type: str, pool: str, shard: int = 0
) -> list[tuple[bytes, float]]:
    """Every member of one pool with its score, in the pool's order (what a
    ZRANGE 0 -1 WITHSCORES of the pool gave before the buckets)."""
    members: list[tuple[bytes, float]] = []
    for bucket in pool_buckets(mirror, visit_type, pool, shard):
        members += mirror.client.zrange(bucket, 0, -1, withscores=True)  # type: ignore[arg-type]
    return members


def bucket_of(mirror: Mirror, visit_type: str, pool: str, origin_id: int, shard: int = 0) -> str:
    """The bucket key of ``pool`` that holds ``origin_id``."""
    for bucket in pool_buckets(mirror, visit_type, pool, shard):
        if mirror.client.zscore(bucket, str(origin_id)) is not None:
            return bucket
    raise LookupError(f"origin {origin_id} is not in {pool}")
