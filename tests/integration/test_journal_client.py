import random
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Message, Producer
from prometheus_client import REGISTRY

from actors.journal import JournalClient
from app.db.connection import DictConnection
from app.inputs.api import RequestVisit
from app.kafka.client import StatusPublisher, producer_config
from app.services.context import Context
from app.services.mirror_sync import check
from app.services.requests import create_request, get_request, take_pending
from app.services.scheduling import schedule_step
from app.settings import Settings
from tests.integration.helpers import journal_dead_letters, list_origins, stats_by_url
from tests.processes import wait_for

URLS = [f"https://forge.example/j{i}.git" for i in range(5)]
SNAP = [bytes([i]) * 20 for i in range(5)]


def drain(client: JournalClient, until: "callable[[], bool]", timeout_s: float = 30) -> None:  # type: ignore[valid-type]
    def step() -> bool:
        messages = client.poll_batch()
        if messages:
            client.process(messages, datetime.now(tz=UTC))
        return bool(until())

    wait_for(step, timeout_s, "journal client to apply the statuses")


def dead_letter_count(reason: str) -> float:
    return (
        REGISTRY.get_sample_value("revisit_journal_dead_letters_total", {"reason": reason}) or 0.0
    )


def test_statuses_update_stats_and_a_poison_message_is_dead_lettered(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS, now=now)
    schedule_step(conn, ctx, "git", 10, now)
    client = JournalClient(settings)
    publisher = StatusPublisher(settings)
    raw = Producer(producer_config(settings))
    before = dead_letter_count("value")
    for i, url in enumerate(URLS[:2]):
        publisher.publish(url, "git", 1, "full", SNAP[i], {"duration_s": 0.5})
    raw.produce(settings.journal_topic, value=b"\xc1 definitely not msgpack", key=b"k")
    raw.flush(10)
    for i, url in enumerate(URLS[2:], start=2):
        publisher.publish(url, "git", 1, "full", SNAP[i])
    publisher.publish(URLS[0], "git", 2, "ongoing", None)

    drain(client, lambda: all(r["last_final_date"] for r in stats_by_url(conn).values()))

    stats = stats_by_url(conn)
    assert {u: bytes(r["last_snapshot"]) for u, r in stats.items()} == dict(
        zip(URLS, SNAP, strict=True)
    )
    assert all(r["eventful_visits"] == 1 for r in stats.values())
    assert stats[URLS[0]]["last_duration_s"] == 0.5
    assert dead_letter_count("value") == before + 1
    assert ctx.mirror.sizes("git")["cooling"] == 5
    assert sum(ctx.mirror.sizes("git").values()) == 5
    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []

    found = journal_dead_letters(settings, 1)
    assert found[0].value() == b"\xc1 definitely not msgpack"
    headers = dict(found[0].headers())
    assert headers["reason"].startswith(b"value: not msgpack")
    client.consumer.close()


def test_replaying_the_whole_topic_leaves_the_stats_unchanged(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS, now=now)
    publisher = StatusPublisher(settings)
    base = now - timedelta(hours=1)
    for visit in (1, 2, 3):
        for i, url in enumerate(URLS):
            status = "failed" if (visit == 2 and i % 2) else "full"
            snapshot = None if status == "failed" else bytes([visit]) * 20
            publisher.publish(
                url, "git", visit, status, snapshot, date=base + timedelta(minutes=visit)
            )
    first = JournalClient(settings)
    drain(first, lambda: all(r["last_visit_number"] == 3 for r in stats_by_url(conn).values()))
    first.consumer.close()
    applied = stats_by_url(conn)

    replay_settings = settings.model_copy(
        update={"journal_group_id": settings.journal_group_id + "-replay"}
    )
    replay = JournalClient(replay_settings)
    consumed = 0

    def replayed() -> bool:
        nonlocal consumed
        messages = replay.poll_batch()
        if messages:
            replay.process(messages, datetime.now(tz=UTC))
            consumed += len(messages)
        return consumed >= 15

    wait_for(replayed, 30, "the replay")
    replay.consumer.close()
    assert stats_by_url(conn) == applied


def request_latencies_observed() -> float:
    labels = {"kind": "save_code_now", "visit_type": "git"}
    return REGISTRY.get_sample_value("revisit_request_latency_seconds_count", labels) or 0.0


def test_a_batch_retried_message_by_message_still_reports_the_requests_it_finished(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The URL rules refuse a URL too long for PostgreSQL first: lifted here, so
    # the database refuses a batch, as it may for a reason no rule foresees.
    monkeypatch.setattr("app.inputs.rules.MAX_URL_BYTES", 100_000)
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS[:1], now=now)
    request_id = create_request(
        conn, RequestVisit(url=URLS[0], visit_type="git"), now=now - timedelta(minutes=5)
    )
    taken = take_pending(conn, ctx, "git", 1, now - timedelta(minutes=4), visit=1)
    assert [t.id for t in taken] == [request_id]
    publisher = StatusPublisher(settings)
    # Incompressible, so its index entry exceeds what a btree page holds: PostgreSQL
    # refuses the whole batch, which is then applied message by message.
    long_url = "https://forge.example/" + random.Random(12).randbytes(10_000).hex()
    publisher.publish(long_url, "git", 1, "full", b"l" * 20, date=now)
    publisher.publish(URLS[0], "git", 1, "created", None, date=now - timedelta(minutes=3))
    publisher.publish(URLS[0], "git", 1, "full", SNAP[0], date=now)
    client = JournalClient(settings)
    batch: list[Message] = []
    wait_for(lambda: len(batch.extend(client.poll_batch()) or batch) >= 3, 30, "the statuses")
    before = request_latencies_observed()

    outcome = client.process(batch, datetime.now(tz=UTC))

    assert [r.reason.split(":")[0] for r in outcome.rejected] == ["database"]
    assert [r.id for r in outcome.finished_requests] == [request_id]
    assert get_request(conn, request_id)["status"] == "succeeded"
    assert request_latencies_observed() == before + 1
    client.close()
