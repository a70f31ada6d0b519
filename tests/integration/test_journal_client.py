import random
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from prometheus_client import REGISTRY

import actors.journal
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


def committed_offsets(settings: Settings) -> int:
    """Messages of the journal topic the client's group has committed."""
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_brokers, "group.id": settings.journal_group_id}
    )
    try:
        topic = consumer.list_topics(settings.journal_topic, timeout=10).topics
        partitions = topic[settings.journal_topic].partitions
        asked = [TopicPartition(settings.journal_topic, p) for p in partitions]
        return sum(max(0, tp.offset) for tp in consumer.committed(asked, timeout=10))
    finally:
        consumer.close()


def test_the_next_batch_is_written_while_one_is_placed_and_offsets_wait_for_its_placement(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS[:2], now=now)
    ids = {url: int(str(row["id"])) for url, row in stats_by_url(conn).items()}
    listed = ctx.mirror.contents("git")
    placing, release = threading.Event(), threading.Event()
    real_place_rows = actors.journal.place_rows

    def held_place_rows(*args: Any, **kwargs: Any) -> int:
        if not placing.is_set():  # the first batch's placement waits
            placing.set()
            assert release.wait(60)
        return real_place_rows(*args, **kwargs)

    monkeypatch.setattr("actors.journal.place_rows", held_place_rows)
    publisher = StatusPublisher(settings)
    publisher.publish(URLS[0], "git", 1, "full", SNAP[0], date=now)
    client = JournalClient(settings)
    poll = client.poll_batch
    # The one poll made while the first batch is placed waits for the second
    # status, even on a slow host (the client only takes what has arrived).
    monkeypatch.setattr(client, "poll_batch", lambda timeout_s=None: poll(3.0))
    stop = threading.Event()
    running = threading.Thread(target=client.run, args=(stop,), daemon=True)
    running.start()
    try:
        assert placing.wait(60), "the first batch was never placed"
        publisher.publish(URLS[1], "git", 1, "full", SNAP[1], date=now)
        wait_for(
            lambda: stats_by_url(conn)[URLS[1]]["last_visit_number"] == 1,
            30,
            "the second batch written while the first is placed",
        )
        assert committed_offsets(settings) == 0
        assert ctx.mirror.contents("git")[ids[URLS[1]]] == listed[ids[URLS[1]]]
        release.set()
        wait_for(lambda: committed_offsets(settings) == 2, 30, "both batches committed")
        placed = ctx.mirror.contents("git")
        assert all(placed[ids[url]] != listed[ids[url]] for url in URLS[:2])
        assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []
    finally:
        release.set()
        stop.set()
        running.join(30)
    assert not running.is_alive()
