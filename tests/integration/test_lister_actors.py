"""The lister interface's writes on the actor API, served by the ``revisit api`` process."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from app.db.connection import DictConnection
from app.domain.queue_names import API_QUEUE
from app.inputs.api import InvalidPayload
from app.listers.client import ListerClient
from app.listers.interface import ListerInterface
from app.services.context import Context
from app.settings import Settings
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys
from tests.processes import running, wait_for


def count(conn: DictConnection, table: str) -> int:
    row = conn.execute(f"select count(*) as n from {table}").fetchone()  # type: ignore[arg-type]
    return int(row["n"]) if row else 0


def test_lister_actors_register_record_and_refuse_a_stale_update(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    client = ListerClient.from_settings(settings)
    interface = ListerInterface(conn, ctx, lambda: datetime.now(tz=UTC))
    logs = tmp_path / "logs"
    logs.mkdir()
    dead = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, API_QUEUE).dead
    r = redis.Redis.from_url(settings.redis_dsn())
    with running({"api": ["revisit", "api"]}, {}, logs):
        client.get_or_create_lister(name="actor", instance_name="forge")
        wait_for(lambda: interface.get_lister("actor", "forge") is not None, 30, "lister", logs)
        lister = interface.get_lister("actor", "forge")
        assert lister is not None
        origins = [
            {"lister_id": str(lister.id), "url": f"https://a.example/{i}", "visit_type": "git"}
            for i in range(50)
        ]
        client.record_listed_origins(origins)
        wait_for(lambda: count(conn, "listed_origins") == 50, 30, "the origins", logs)
        client.update_lister(lister.model_copy(update={"current_state": {"page": 2}}))
        wait_for(
            lambda: (interface.get_lister("actor", "forge") or lister).current_state == {"page": 2},
            30,
            "the state",
            logs,
        )
        client.update_lister(lister.model_copy(update={"current_state": {"page": 1}}))
        wait_for(lambda: r.zcard(dead) == 1, 30, "the stale update to be dead-lettered", logs)
    assert (interface.get_lister("actor", "forge") or lister).current_state == {"page": 2}
    log = (logs / "api.log").read_text()
    assert "StaleData" in log
    # No results backend: an actor that returned a value would log a warning per message.
    assert "returned a value that is not None" not in log
    assert sum(ctx.mirror.sizes("git").values()) == 50


def test_lister_client_refuses_a_bad_origin_before_sending(settings: Settings) -> None:
    client = ListerClient.from_settings(settings)
    with pytest.raises(InvalidPayload, match=r"RecordListedOrigins: listed_origins\.0\.lister_id"):
        client.record_listed_origins([{"lister_id": "nope", "url": "u", "visit_type": "git"}])
    keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, API_QUEUE)
    assert redis.Redis.from_url(settings.redis_dsn()).hlen(keys.messages) == 0
