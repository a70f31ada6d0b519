"""A worker process's registration of its threads (actors.registry), without Redis."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import redis

from actors import registry
from actors.registry import WorkerRegistry
from queues.keys import queue_workers
from tests.processes import wait_for


class FlakyRedis:
    """Just enough of a Redis client for the registry; its first write fails."""

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}
        self.written: dict[str, str] = {}
        self.writes = 0

    def pipeline(self, transaction: bool) -> FlakyRedis:
        return self

    def hset(self, key: str, field: str, value: str) -> None:
        self.pending[key] = value

    def execute(self) -> None:
        self.writes += 1
        if self.writes == 1:
            raise redis.ConnectionError("Connection refused")
        self.written.update(self.pending)


def test_a_worker_keeps_registering_after_redis_was_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "REFRESH_S", 0.05)
    client = FlakyRedis()
    middleware = WorkerRegistry(client, "revisit")  # type: ignore[arg-type]
    worker: Any = SimpleNamespace(consumer_whitelist={"visit.git.express"}, worker_threads=4)
    middleware.after_worker_boot(None, worker)
    try:
        key = queue_workers("revisit", "visit.git.express")
        wait_for(lambda: key in client.written, 10, "the registration after the failed one")
    finally:
        middleware._stop.set()
    assert client.written[key].startswith("4|")
