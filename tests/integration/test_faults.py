"""Single faults on real servers: every long-running process recovers by itself.

Redis and the Kafka-protocol broker are the test's own, started on a fixed port
so they can be stopped and started again at the same address; PostgreSQL is
made unavailable by refusing connections to the test's database and ending
its sessions, which is what its clients see during a restart.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dramatiq
import psycopg
import pytest
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
from dramatiq.middleware import CurrentMessage
from prometheus_client import REGISTRY
from pydantic import SecretStr

from actors.journal import JournalClient
from actors.scheduler import SchedulerLoop
from app.db.connection import DictConnection, connect
from app.db.scheduling import visit_type_configs
from app.devtools import embedded
from app.domain.journal_event import VisitStatusEvent
from app.domain.queue_names import lane_queue
from app.kafka.client import StatusPublisher, producer_config
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.mirror_sync import LOST_VISIT_GRACE_S, check
from app.services.scheduling import schedule_step
from app.settings import Settings
from queues.dramatiq_broker import queue_depth
from queues.keys import DramatiqQueueKeys
from tests.integration.helpers import WatchedPublisher, list_origins, stats_by_url
from tests.processes import wait_for

URLS = [f"https://faults.example/r{i}.git" for i in range(6)]
T0 = datetime(2026, 2, 1, tzinfo=UTC)


def retries(cause: str) -> float:
    sample = REGISTRY.get_sample_value("revisit_journal_batch_retries_total", {"cause": cause})
    return sample or 0.0


def dead_lettered(reason: str) -> float:
    sample = REGISTRY.get_sample_value("revisit_journal_dead_letters_total", {"reason": reason})
    return sample or 0.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[embedded.Restartable]:
    """A Redis server of this test alone, which it may stop and start again."""
    try:
        with embedded.Restartable(embedded.redis_server, tmp_path) as service:
            yield service
    except embedded.ServiceError as exc:
        pytest.fail(f"redis-server: {exc}")


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[embedded.Restartable]:
    """A Kafka-protocol broker of this test alone, which it may restart (losing every topic)."""
    with embedded.Restartable(embedded.kafka_broker, tmp_path) as service:
        yield service


class Running:
    """A long-running loop (journal client, scheduler) in a thread of the test."""

    def __init__(self, loop: JournalClient | SchedulerLoop) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(loop,), daemon=True)
        self.thread.start()

    def _run(self, loop: JournalClient | SchedulerLoop) -> None:
        try:
            loop.run(self.stop)
        except BaseException as exc:
            self.error = exc
            raise

    def alive(self) -> bool:
        return self.thread.is_alive() and self.error is None

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def set_database_available(admin_dsn: str, dbname: str, available: bool) -> None:
    """Allow or refuse connections to ``dbname``; refusing also ends its sessions."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(
            f"alter database {dbname} with allow_connections {str(available).lower()}"  # type: ignore[arg-type]
        )
        if not available:
            admin.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity where datname = %s",
                (dbname,),
            )


def last_visit_number(settings: Settings, url: str) -> object:
    with connect(settings) as conn:
        return stats_by_url(conn).get(url, {}).get("last_visit_number")


def test_journal_client_survives_a_redis_restart_and_places_what_it_wrote(
    settings: Settings, conn: DictConnection, own_redis: embedded.Restartable
) -> None:
    settings = settings.model_copy(update={"redis_url": SecretStr(own_redis.address)})
    ctx = Context.from_settings(settings)
    list_origins(conn, ctx, URLS[:2], now=T0)
    publisher = StatusPublisher(settings)
    client = JournalClient(settings)
    running = Running(client)
    before = retries("redis")
    try:
        publisher.publish(URLS[0], "git", 1, "full", b"a" * 20, date=T0)
        wait_for(lambda: last_visit_number(settings, URLS[0]) == 1, 30, "the first status")
        own_redis.stop()
        publisher.publish(URLS[1], "git", 1, "full", b"b" * 20, date=T0)
        wait_for(lambda: retries("redis") > before, 30, "a retry while Redis is down")
        assert running.alive()
        own_redis.start()
        origin_id = stats_by_url(conn)[URLS[1]]["id"]
        wait_for(
            lambda: ctx.mirror.contents("git").get(int(str(origin_id))) is not None,
            60,
            "the origin placed in the restarted Redis",
        )
        assert running.alive()
        assert last_visit_number(settings, URLS[1]) == 1
    finally:
        running.close()


def test_scheduler_starts_before_postgresql_and_survives_losing_it(
    service_env: dict[str, str],
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    list_origins(conn, ctx, URLS[:3], now=T0)
    dbname = str(conn.info.dbname)
    admin = service_env["REVISIT_DATABASE_URL"]
    monkeypatch.setattr("actors.scheduler.POLL_INTERVAL_S", 0.2)
    set_database_available(admin, dbname, False)
    try:
        loop = SchedulerLoop(settings)  # PostgreSQL refuses connections here
        running = Running(loop)
        time.sleep(1.0)  # a few steps fail while PostgreSQL is away
        assert running.alive()
        assert loop.db.opened == 0
    finally:
        set_database_available(admin, dbname, True)
    try:
        wait_for(lambda: ctx.mirror.sizes("git")["inflight"] == 3, 60, "the first visits sent")
        set_database_available(admin, dbname, False)
        time.sleep(1.0)
        assert running.alive()
        set_database_available(admin, dbname, True)
        with connect(settings) as fresh:
            list_origins(fresh, ctx, URLS[3:], now=T0 + timedelta(days=1))
        wait_for(
            lambda: ctx.mirror.sizes("git")["inflight"] == 6,
            60,
            "origins listed after the outage to be sent",
        )
        assert running.alive()
        assert loop.db.opened >= 2
    finally:
        running.close()


def read_topic(settings: Settings, topic: str, count: int) -> list[Message]:
    """The first ``count`` messages of ``topic``, read by a new consumer group."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_brokers,
            "group.id": f"read-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    found: list[Message] = []

    def read() -> bool:
        found.extend(m for m in consumer.consume(10, timeout=0.5) if m.error() is None)
        return len(found) >= count

    try:
        wait_for(read, 60, f"{count} message(s) on {topic}")
    finally:
        consumer.close()
    return found


def dead_letters(settings: Settings, count: int) -> list[dict[str, bytes]]:
    """The headers of the first ``count`` messages of the dead-letter topic."""
    messages = read_topic(settings, settings.dead_letter_topic, count)
    return [{k: bytes(v or b"") for k, v in m.headers() or []} for m in messages]


def statuses_on_topic(settings: Settings, count: int) -> list[bytes]:
    """The keys of the first ``count`` messages of the journal topic."""
    return [bytes(m.key() or b"") for m in read_topic(settings, settings.journal_topic, count)]


def test_a_worker_publishes_again_after_a_broker_restart_that_lost_its_producer_id(
    settings: Settings, own_broker: embedded.Restartable
) -> None:
    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    publisher = StatusPublisher(settings)  # a worker's producer, kept across the restart
    publisher.publish(URLS[0], "git", 1, "created", None, date=T0)
    own_broker.stop()
    own_broker.start()
    publisher.publish(URLS[1], "git", 1, "full", b"b" * 20, date=T0)
    assert publisher.producer.replaced >= 1
    [key] = statuses_on_topic(settings, 1)  # the broker lost the first one with its topics
    assert URLS[1].encode() in key


def test_a_final_status_the_broker_misses_within_the_time_limit_is_published_once_it_is_back(
    settings: Settings, own_broker: embedded.Restartable, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actors.worker

    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    publisher = WatchedPublisher(settings)
    monkeypatch.setattr(actors.worker, "publisher", lambda: publisher)
    url, queue, limit_s = "sim://faults/late", lane_queue("simulated", "express"), 6.0
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=queue, actor_name="visit", args=(), kwargs={}, options={}
    )
    message.options["time_limit"] = int(limit_s * 1000)
    actors.worker.broker.flush(queue)  # what earlier tests left in the worker's queue
    ended: list[float] = []

    def visit() -> None:  # as a worker thread runs it
        CurrentMessage._MESSAGE.set(message)
        actors.worker.visit.fn(1, url, "simulated", {"duration_s": 2.0}, 1, time.time())
        ended.append(time.monotonic())

    began = time.monotonic()
    thread = threading.Thread(target=visit, daemon=True)
    thread.start()
    wait_for(lambda: publisher.statuses == ["created"], 30, "the created status published")
    own_broker.stop()  # down when the visit ends
    thread.join(limit_s + 5)
    # Ended within its time limit (which would have interrupted it), status unpublished...
    assert ended and ended[0] - began < limit_s
    assert publisher.statuses == ["created"]
    # ...and handed, in the visit's queue, to the actor that publishes it later.
    # The worker module's own broker (its settings are those of the first test
    # that imported it).
    broker = actors.worker.broker
    stored = broker.client.hvals(DramatiqQueueKeys(broker.namespace, queue).messages)
    [later] = [dramatiq.Message.decode(value) for value in stored]  # type: ignore[union-attr]
    assert later.actor_name == "publish_status"
    assert queue_depth(broker, queue) == 0  # a late status is no visit
    own_broker.start()
    actors.worker.publish_status.fn(**later.kwargs)
    # The restart lost "created" with the topic; the final status may come twice
    # (the producer re-sends what it held), which the journal client absorbs.
    keys = statuses_on_topic(settings, 1)
    assert keys and all(url.encode() in key for key in keys)
    assert publisher.statuses[-1] == "full"


def test_journal_recreates_a_missing_dead_letter_topic_and_goes_on(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:1], now=T0)
    client = JournalClient(settings)  # creates both topics
    admin = AdminClient({"bootstrap.servers": settings.kafka_brokers})
    for future in admin.delete_topics([settings.dead_letter_topic]).values():
        future.result(30)
    before = dead_lettered("value")
    running = Running(client)
    try:
        poison = Producer(producer_config(settings))
        poison.produce(settings.journal_topic, value=b"\xc1 not msgpack")
        assert poison.flush(30) == 0
        StatusPublisher(settings).publish(URLS[0], "git", 1, "full", b"a" * 20, date=T0)
        wait_for(lambda: last_visit_number(settings, URLS[0]) == 1, 60, "the good status")
        # Acknowledged by the broker (the client waits for it before committing).
        assert dead_lettered("value") == before + 1
        assert running.alive()
    finally:
        running.close()


def test_a_value_postgresql_refuses_is_dead_lettered_and_the_batch_goes_on(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The URL rules refuse a URL too long for PostgreSQL first: lifted here, so
    # the database refuses a value, as it may for a reason no rule foresees.
    monkeypatch.setattr("app.inputs.rules.MAX_URL_BYTES", 100_000)
    list_origins(conn, ctx, URLS[:1], now=T0)
    publisher = StatusPublisher(settings)
    # Incompressible, so its index entry exceeds what a btree page holds.
    long_url = "https://faults.example/" + random.Random(12).randbytes(10_000).hex()
    publisher.publish(long_url, "git", 1, "full", b"l" * 20, date=T0)
    publisher.publish(URLS[0], "git", 1, "full", b"a" * 20, date=T0)
    running = Running(JournalClient(settings))
    try:
        wait_for(lambda: last_visit_number(settings, URLS[0]) == 1, 60, "the good status")
        [headers] = dead_letters(settings, 1)
        assert headers["reason"].startswith(b"database:")
        assert long_url not in stats_by_url(conn)
        assert running.alive()
    finally:
        running.close()


def test_after_a_redis_wipe_a_visit_sent_but_not_started_is_sent_again_after_the_grace(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:2], now=T0)
    assert len(schedule_step(conn, ctx, "git", 10, T0).orders) == 2
    started = T0 + timedelta(minutes=1)  # the worker of URLS[0] published 'created'
    created = VisitStatusEvent(URLS[0], "git", 1, started, "created", None)
    apply_events_batch(conn, ctx, [created], visit_type_configs(conn), started)
    ctx.redis.flushdb()  # the mirror and every Dramatiq message are gone

    wiped = T0 + timedelta(hours=1)
    grace = timedelta(seconds=LOST_VISIT_GRACE_S)
    first = schedule_step(conn, ctx, "git", 10, wiped)
    assert first.rebuilt
    assert first.orders == []
    assert check(conn, ctx, "git", wiped) == []
    assert schedule_step(conn, ctx, "git", 10, wiped + grace - timedelta(seconds=1)).orders == []
    again = schedule_step(conn, ctx, "git", 10, wiped + grace)
    # The started visit will report; only the lost one is sent again.
    assert [o.url for o in again.orders] == [URLS[1]]
