"""The journal client and a broker that is away: at start, while stopping, and
after a restart that made the broker forget the consumer group.

Each test has a Kafka-protocol broker of its own (memory-only tansu, started
on a fixed port so it can be stopped and started again at the same address).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from actors.journal import JournalClient
from actors.journal_consumer import JournalConsumer
from app.db.connection import DictConnection, connect
from app.devtools import embedded
from app.kafka.client import Record, ResilientProducer, StatusPublisher
from app.services.context import Context
from app.settings import Settings
from tests.integration.helpers import list_origins, stats_by_url
from tests.integration.test_faults import Running, set_database_available
from tests.processes import BIN, wait_for

URLS = [f"https://broker.example/r{i}.git" for i in range(4)]
T0 = datetime(2026, 3, 1, tzinfo=UTC)
#: How long a stopped journal client may take to exit: one slice of each
#: blocking wait, never a whole publish timeout (120 s) or reconnect delay.
EXIT_BOUND_S = 15


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[embedded.Restartable]:
    """A broker of this test alone, not started yet."""
    service = embedded.Restartable(embedded.kafka_broker, tmp_path)
    service.address = f"127.0.0.1:{service.port}"
    try:
        yield service
    finally:
        service.stop()


def journal_process(settings: Settings, logdir: Path, metrics_port: int) -> subprocess.Popen[bytes]:
    """``revisit journal`` as the Procfile starts it, with ``settings``."""
    env = {
        **os.environ,
        "REVISIT_KAFKA_BROKERS": settings.kafka_brokers,
        "REVISIT_METRICS_PORT": str(metrics_port),
        "REVISIT_LOG_LEVEL": "INFO",
    }
    log = (logdir / "journal.log").open("wb")
    return subprocess.Popen(
        [str(BIN / "revisit"), "journal"], env=env, stdout=log, stderr=subprocess.STDOUT
    )


def scrape(port: int) -> dict[str, float]:
    """Every sample the process serves, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        f"{s.name}{sorted(s.labels.items()) if s.labels else ''}": s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def kafka_errors(port: int) -> float:
    try:
        samples = scrape(port)
    except OSError:
        return 0.0
    return sum(v for k, v in samples.items() if k.startswith("revisit_journal_kafka_errors_total"))


def last_visit_number(settings: Settings, url: str) -> object:
    with connect(settings) as conn:
        return stats_by_url(conn).get(url, {}).get("last_visit_number")


def stop_and_wait(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then the exit code if the process ended within EXIT_BOUND_S."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return None


def test_the_journal_process_waits_for_a_broker_that_starts_later_then_applies_statuses(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    own_broker: embedded.Restartable,
    tmp_path: Path,
) -> None:
    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    list_origins(conn, ctx, URLS[:2], now=T0)
    port = embedded.free_port()
    proc = journal_process(settings, tmp_path, port)
    try:
        wait_for(lambda: kafka_errors(port) > 0, 60, "the broker's absence counted", tmp_path)
        assert scrape(port)["revisit_journal_assigned_partitions"] == 0
        assert proc.poll() is None
        own_broker.start()
        publisher = StatusPublisher(settings)
        publisher.publish(URLS[0], "git", 1, "full", b"a" * 20, date=T0)
        publisher.publish(URLS[1], "git", 1, "failed", None, date=T0)
        wait_for(
            lambda: last_visit_number(settings, URLS[1]) == 1, 90, "statuses applied", tmp_path
        )
        assert last_visit_number(settings, URLS[0]) == 1
        assert scrape(port)["revisit_journal_assigned_partitions"] > 0
    finally:
        code = stop_and_wait(proc)
    assert code == 0
    log = (tmp_path / "journal.log").read_text()
    assert "Traceback" not in log
    assert "REVISIT_KAFKA_BROKERS is" in log


def test_the_journal_process_told_to_stop_while_the_broker_is_away_exits_at_once(
    settings: Settings, own_broker: embedded.Restartable, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    port = embedded.free_port()
    proc = journal_process(settings, tmp_path, port)
    wait_for(lambda: kafka_errors(port) > 0, 60, "the broker's absence counted", tmp_path)
    assert stop_and_wait(proc) == 0


def test_a_dead_letter_send_to_an_absent_broker_gives_up_when_told_to_stop(
    settings: Settings, own_broker: embedded.Restartable
) -> None:
    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    stop = threading.Event()
    producer = ResilientProducer(settings, stop)
    failure: list[BaseException] = []

    def send() -> None:
        try:
            producer.send([Record(settings.dead_letter_topic, b"x")])
        except BaseException as exc:
            failure.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(3)
    assert sender.is_alive()  # waiting for an acknowledgement that cannot come
    stop.set()
    sender.join(EXIT_BOUND_S)
    assert not sender.is_alive()
    assert "stopped before acknowledgement" in str(failure[0])


def database_reconnects() -> float:
    sample = REGISTRY.get_sample_value(
        "revisit_journal_database_retries_total", {"reason": "reconnect"}
    )
    return sample or 0.0


def test_a_journal_client_stopped_while_it_dead_letters_to_an_absent_broker_exits_at_once(
    service_env: dict[str, str],
    settings: Settings,
    conn: DictConnection,
    own_broker: embedded.Restartable,
) -> None:
    own_broker.start()
    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    dbname = str(conn.info.dbname)
    admin = service_env["REVISIT_DATABASE_URL"]
    client = JournalClient(settings)
    poison = ResilientProducer(settings)
    before = database_reconnects()
    set_database_available(admin, dbname, False)
    running = Running(client)
    try:
        poison.send([Record(settings.journal_topic, b"\xc1 not msgpack")])
        # The batch is read, and waits for PostgreSQL.
        wait_for(lambda: database_reconnects() > before, 60, "the batch waiting for PostgreSQL")
        own_broker.stop()
        set_database_available(admin, dbname, True)
        # Applied; now its dead letter waits for an absent broker.
        wait_for(lambda: client.dead_letters.replaced > 0, 60, "the dead letter waiting")
        running.stop.set()
        running.thread.join(EXIT_BOUND_S)
        assert not running.thread.is_alive()
        assert running.error is None
    finally:
        set_database_available(admin, dbname, True)
        running.close()


def test_a_consumer_without_an_assignment_for_too_long_is_replaced_and_consumes(
    settings: Settings, own_broker: embedded.Restartable, monkeypatch: pytest.MonkeyPatch
) -> None:
    own_broker.start()
    monkeypatch.setattr("actors.journal_consumer.REJOIN_AFTER_S", 30.0)
    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    now = [0.0]
    consumer = JournalConsumer(settings, clock=lambda: now[0])
    try:
        wait_for(lambda: not consumer.poll() and consumer.unassigned_since is None, 60, "assigned")
        consumer._on_revoke(consumer.consumer, [])  # its group lost, as after a broker restart
        now[0] = 29.0
        assert not consumer.replace_if_unassigned()
        now[0] = 31.0
        first = consumer.consumer
        assert consumer.replace_if_unassigned()
        assert consumer.consumer is not first
        StatusPublisher(settings).publish(URLS[0], "git", 1, "full", b"a" * 20, date=T0)
        got: list[object] = []
        wait_for(lambda: bool(got.extend(consumer.poll()) or got), 60, "the status consumed")
        assert consumer.unassigned_since is None
        assert consumer.replaced == 1
        # Given nothing while partitions go to no one (the topic was made again
        # after the group's assignor ran): replaced too.
        consumer._on_assign(consumer.consumer, [])
        now[0] = 62.0
        assert consumer.unowned_partitions() > 0
        assert consumer.replace_if_unassigned()
        assert consumer.replaced == 2
    finally:
        consumer.close()


def test_the_journal_client_applies_statuses_published_after_broker_restarts(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    own_broker: embedded.Restartable,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own_broker.start()
    monkeypatch.setattr("actors.journal_consumer.REJOIN_AFTER_S", 10.0)
    settings = settings.model_copy(update={"kafka_brokers": own_broker.address})
    list_origins(conn, ctx, URLS, now=T0)
    publisher = StatusPublisher(settings)
    running = Running(JournalClient(settings))
    try:
        for visit, url in enumerate(URLS, start=1):
            publisher.publish(url, "git", visit, "full", b"a" * 20, date=T0)
            wait_for(
                lambda url=url, visit=visit: last_visit_number(settings, url) == visit,
                120,
                f"the status published after restart {visit - 1}",
            )
            assert running.alive()
            own_broker.stop()
            own_broker.start()  # memory-only: it forgot topics, offsets and the group
    finally:
        running.close()
