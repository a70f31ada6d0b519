"""The URL rules hold at every entry: a URL with credentials, or naming an
internal host revisit is not allowed to visit, is refused with the reason and
nothing of it is written (its listing batch alone is refused; the journal
dead-letters its status)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from confluent_kafka import Producer

from actors.journal import JournalClient
from app.client import RevisitClient
from app.db.connection import DictConnection
from app.domain.queue_names import API_QUEUE
from app.inputs.api import InvalidPayload
from app.kafka.client import producer_config
from app.kafka.codec import encode, visit_status_key, visit_status_value
from app.rpc.codec import encode as rpc_encode
from app.services.context import Context
from app.settings import Settings
from queues.keys import DramatiqQueueKeys
from tests.integration.helpers import (
    cli,
    journal_dead_letters,
    list_origins,
    send_to_api,
    stats_by_url,
)
from tests.integration.test_rpc_reference_client import post
from tests.processes import running, wait_for

SECRET = "S3cretPass"
BAD = [
    (f"https://user:{SECRET}@forge.example/x.git", "user name or password"),
    ("http://127.0.0.1:6391/", "names a loopback address (127.0.0.1)"),
    ("http://2130706433/", "names a loopback address (2130706433)"),
    ("https://169.254.169.254/latest/meta-data", "names a link-local address"),
    ("file:///etc/passwd", "names localhost (file://)"),
]
Allow = Callable[[list[str]], None]


def written(conn: DictConnection) -> str:
    """Every URL revisit stored, as one text."""
    rows = conn.execute(
        "select url from listed_origins union all select url from visit_requests "
        "union all select url from origin_visit_stats"
    ).fetchall()
    return "\n".join(str(r["url"]) for r in rows)


@pytest.mark.parametrize(("url", "reason"), BAD)
def test_a_request_for_a_forbidden_url_is_refused_and_nothing_written(
    settings: Settings, conn: DictConnection, internal_hosts: Allow, url: str, reason: str
) -> None:
    internal_hosts([])
    result = cli("request", "add", url)
    assert result.returncode == 2
    assert reason in result.stderr
    assert SECRET not in result.stderr + result.stdout
    sent = cli("origins", "send", url, "--visit-type", "git")
    assert sent.returncode == 2 and reason in sent.stderr
    with pytest.raises(InvalidPayload, match=reason.replace("(", r"\(").replace(")", r"\)")):
        RevisitClient.from_settings(settings).request_visit(url=url, visit_type="git")
    assert written(conn) == ""


def test_an_internal_url_is_accepted_where_the_setting_allows_it(
    settings: Settings, conn: DictConnection, internal_hosts: Allow
) -> None:
    internal_hosts(["127.0.0.1", "localhost"])
    for url in ("http://127.0.0.1:6391/", "file:///srv/git/a"):
        assert cli("request", "add", url).returncode == 0
    assert written(conn).split("\n") == ["http://127.0.0.1:6391/", "file:///srv/git/a"]


def test_a_listing_import_refuses_the_batch_of_a_forbidden_url_and_keeps_the_others(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path, internal_hosts: Allow
) -> None:
    internal_hosts([])
    assert cli("lister", "register", "forge", "one").returncode == 0
    lines = [f"https://g.example/{i}" for i in range(4)] + [url for url, _ in BAD]
    listing = tmp_path / "listing.jsonl"
    listing.write_text("".join(f'{{"url": "{u}", "visit_type": "git"}}\n' for u in lines))
    result = cli("origins", "import", str(listing), "--lister", "forge/one", "--batch-size", "4")
    assert result.returncode == 2
    for number, (_, reason) in enumerate(BAD, start=5):
        assert f"line {number}: url: Value error, URL " in result.stderr
        assert reason in result.stderr
    assert SECRET not in result.stderr + result.stdout
    assert sorted(written(conn).split("\n")) == sorted(lines[:4] * 2)  # listed + stats
    assert sum(ctx.mirror.sizes("git").values()) == 4


@pytest.mark.parametrize(("url", "reason"), BAD)
def test_the_reference_rpc_refuses_a_forbidden_url_in_a_listing(
    rpc_url: str, conn: DictConnection, internal_hosts: Allow, url: str, reason: str
) -> None:
    internal_hosts([])
    status, lister = post(rpc_url + "lister/get_or_create", rpc_encode({"name": "forge"}))
    assert status == 200
    origins = [
        {"lister_id": lister["id"], "url": u, "visit_type": "git"}
        for u in ("https://g.example/a", url)
    ]
    status, error = post(rpc_url + "origins/record", rpc_encode({"listed_origins": origins}))
    assert status == 400
    assert "listed_origins[1].url: Value error, URL " in error["message"]
    assert reason in error["message"]
    assert SECRET not in error["message"]
    assert written(conn) == ""


def test_the_api_actor_refuses_a_forbidden_url_in_a_listing(
    settings: Settings, conn: DictConnection, tmp_path: Path, internal_hosts: Allow
) -> None:
    internal_hosts([])
    assert cli("lister", "register", "forge", "one").returncode == 0
    lister = {"lister_name": "forge", "instance_name": "one"}
    send_to_api(
        settings,
        "record_listing",
        [{**lister, "origins": [{"url": url, "visit_type": "git"}]} for url, _ in BAD],
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    dead = DramatiqQueueKeys("dramatiq", API_QUEUE).dead
    client = RevisitClient.from_settings(settings)
    with running({"api": ["revisit", "api"]}, {}, logs):
        wait_for(lambda: client.broker.client.zcard(dead) == len(BAD), 30, "dead letters", logs)
    log = (logs / "api.log").read_text()
    for _, reason in BAD:
        assert reason in log
    assert written(conn) == ""


def test_the_journal_dead_letters_a_status_whose_url_breaks_the_rules(
    settings: Settings, conn: DictConnection, ctx: Context, internal_hosts: Allow
) -> None:
    internal_hosts([])
    good = "https://forge.example/j.git"
    list_origins(conn, ctx, [good])
    client = JournalClient(settings)
    raw = Producer(producer_config(settings))
    date = datetime.now(tz=UTC)
    for url in ("http://127.0.0.1:6391/", "https://x/" + "a" * 20_010, good):
        value = visit_status_value(url, 1, date, "full", b"\x01" * 20, "git", None)
        raw.produce(settings.journal_topic, value=encode(value), key=visit_status_key(url, 1, date))
    raw.flush(10)

    def applied() -> bool:
        if messages := client.poll_batch():
            client.process(messages, datetime.now(tz=UTC))
        return bool(stats_by_url(conn)[good]["last_final_date"])

    wait_for(applied, 30, "the good status")
    assert set(stats_by_url(conn)) == {good}
    client.consumer.close()
    found = [dict(m.headers())["reason"] for m in journal_dead_letters(settings, 2)]
    assert sorted(found) == [
        b"origin: URL names a loopback address (127.0.0.1), which is not visited unless "
        b"REVISIT_ALLOWED_INTERNAL_HOSTS allows it",
        b"origin: URL of 20020 bytes, longer than 2048",
    ]


def _redis_values(client: redis.Redis) -> dict[bytes, bytes]:
    """Every key of the Redis database, with its whole value as one text."""
    values: dict[bytes, bytes] = {}
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"string":
            value = [client.get(key) or b""]
        elif kind == b"hash":
            value = [b for item in client.hgetall(key).items() for b in item]
        elif kind == b"list":
            value = client.lrange(key, 0, -1)
        elif kind == b"set":
            value = list(client.smembers(key))
        elif kind == b"zset":
            value = client.zrange(key, 0, -1)
        else:
            value = [kind]
        values[key] = b"\n".join(value)
    return values


def test_a_refused_api_payloads_credentials_are_in_no_log_and_no_redis_key(
    settings: Settings, conn: DictConnection, tmp_path: Path, internal_hosts: Allow
) -> None:
    internal_hosts([])
    url = f"https://user:{SECRET}@forge.example/x.git"
    send_to_api(settings, "request_visit", [{"url": url, "visit_type": "git"}])
    send_to_api(settings, "add_forge", [{"lister": "gitea", "instance": "a", "url": url}])
    logs = tmp_path / "logs"
    logs.mkdir()
    keys = DramatiqQueueKeys("dramatiq", API_QUEUE)
    client = RevisitClient.from_settings(settings).broker.client
    with running({"api": ["revisit", "api"]}, {}, logs):
        wait_for(lambda: client.zcard(keys.dead) == 2, 30, "dead letters", logs)
    log = (logs / "api.log").read_text()
    assert "InvalidPayload: RequestVisit: url: Value error, URL holds a user name" in log
    assert "InvalidPayload: AddForge: url: Value error, URL holds a user name" in log
    assert SECRET not in log
    stored = _redis_values(client)
    assert not [key for key, value in stored.items() if SECRET.encode() in value]
    dead = b"\n".join(client.hvals(keys.dead_messages))
    assert dead.count(b"https://***@forge.example/x.git") == 2
    assert written(conn) == ""
