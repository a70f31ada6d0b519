"""Dead letters: the wrapper over Dramatiq's Redis layout checked against a real
Dramatiq broker and worker, and the ``revisit dead-letters`` commands."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import dramatiq
import pytest
import redis
from dramatiq import Worker

from actors.broker import make_broker
from app.db.connection import DictConnection
from app.domain.queue_names import API_QUEUE
from app.kafka.client import JournalDeadLetter, PublishRefused, read_dead_letters, replay
from app.settings import Settings
from queues import dramatiq_queues as dq
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys
from tests.integration.helpers import cli
from tests.processes import running, wait_for, with_constants

QUEUE = "test.dead"


@pytest.fixture
def worker(settings: Settings) -> Iterator[tuple[dramatiq.Broker, list[str]]]:
    """A real Dramatiq worker on QUEUE whose actor fails until told otherwise."""
    broker = make_broker(settings)
    seen: list[str] = []

    def flaky(word: str) -> None:
        seen.append(word)
        if "fixed" not in seen:
            raise ValueError(f"cannot handle {word}")

    dramatiq.actor(flaky, actor_name="flaky", queue_name=QUEUE, max_retries=0, broker=broker)
    running = Worker(broker, worker_timeout=100, worker_threads=1)
    running.start()
    yield broker, seen
    running.stop()


def test_a_failed_message_is_listed_with_its_reason_then_requeued_and_done(
    settings: Settings, worker: tuple[dramatiq.Broker, list[str]]
) -> None:
    broker, seen = worker
    broker.get_actor("flaky").send("apple")
    client = broker.client  # type: ignore[attr-defined]
    wait_for(lambda: dq.depths(client, [QUEUE])[QUEUE].dead == 1, 20, "a dead letter")
    assert dq.dead_letter_queues(client) == [QUEUE]
    [letter] = dq.dead_letters(client, QUEUE, 10)
    assert (letter.actor, letter.queue) == ("flaky", QUEUE)
    listed = cli("dead-letters", "list")
    assert listed.returncode == 0, listed.stderr
    assert letter.message_id in listed.stdout
    assert "ValueError: cannot handle apple" in listed.stdout
    shown = cli("dead-letters", "show", QUEUE, letter.message_id)
    assert '"actor_name":"flaky"' in shown.stdout.replace(" ", "")
    seen.append("fixed")
    requeued = cli("dead-letters", "requeue", QUEUE, letter.message_id)
    assert requeued.returncode == 0, requeued.stderr
    wait_for(lambda: seen.count("apple") == 2, 20, "the requeued message to run")
    time.sleep(0.5)  # let the worker ack it
    depth = dq.depths(client, [QUEUE])[QUEUE]
    assert (depth.waiting, depth.running, depth.dead) == (0, 0, 0)


def test_dropping_dead_letters_removes_them_and_unknown_ids_are_refused(
    settings: Settings, worker: tuple[dramatiq.Broker, list[str]]
) -> None:
    broker, _ = worker
    for word in ("a", "b"):
        broker.get_actor("flaky").send(word)
    client = broker.client  # type: ignore[attr-defined]
    wait_for(lambda: dq.depths(client, [QUEUE])[QUEUE].dead == 2, 20, "two dead letters")
    unknown = cli("dead-letters", "drop", QUEUE, "no-such-id")
    assert unknown.returncode == 1 and "were not dead letters" in unknown.stderr
    assert cli("dead-letters", "drop", QUEUE).returncode == 2
    kept = cli("dead-letters", "drop", QUEUE, "--all", stdin="n\n")
    assert kept.returncode == 1
    assert f"drop the 2 dead letter(s) of {QUEUE} for good?" in kept.stderr
    assert "error: nothing dropped" in kept.stderr
    assert dq.depths(client, [QUEUE])[QUEUE].dead == 2
    dropped = cli("dead-letters", "drop", QUEUE, "--all", "--yes")
    assert dropped.returncode == 0 and "dropped 2 message(s)" in dropped.stdout
    assert dq.depths(client, [QUEUE])[QUEUE].dead == 0
    assert client.hlen(DramatiqQueueKeys(DRAMATIQ_NAMESPACE, QUEUE).dead_messages) == 0


def test_messages_dramatiq_cannot_decode_are_dead_lettered_by_the_api_process(
    settings: Settings, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(settings.redis_dsn())
    queue = API_QUEUE
    keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, queue)
    for i in range(5):
        client.hset(keys.messages, f"junk-{i}", b"\xff not json")
        client.rpush(keys.waiting, f"junk-{i}")
    client.rpush(keys.waiting, "bodiless")
    logs = tmp_path / "logs"
    logs.mkdir()

    def unacked() -> int:
        return sum(client.scard(k) for k in client.scan_iter(match=keys.acks("*")))

    env = with_constants({"actors.undecodable.SWEEP_INTERVAL_S": 0.5})
    with running({"api": ["revisit", "api"]}, env, logs):
        wait_for(lambda: client.zcard(keys.dead) == 6, 30, "six dead letters", logs)
        wait_for(lambda: unacked() == 0, 30, "nothing left unacknowledged", logs)
    assert client.hlen(keys.messages) == 0 and client.llen(keys.waiting) == 0
    listed = cli("dead-letters", "list", queue)
    assert listed.stdout.count("not a Dramatiq message") == 6
    assert "(undecodable)" in listed.stdout


def test_journal_dead_letters_are_listed_with_their_reason_and_replayed_once_fixed(
    settings: Settings, conn: DictConnection, internal_hosts: Callable[[list[str]], None]
) -> None:
    from actors.journal import JournalClient
    from app.kafka.client import StatusPublisher

    client = JournalClient(settings)
    url = "https://10.9.8.7/new-type"
    # of a visit type revisit does not know: applied, the type created paused
    StatusPublisher(settings).publish(url, "zzz", 1, "full", b"s" * 20)

    def apply_until(done: Callable[[], bool]) -> None:
        def step() -> bool:
            messages = client.poll_batch()
            if messages:
                client.process(messages, datetime.now(tz=UTC))
            return done()

        wait_for(step, 30, "the journal client")

    def dead() -> bool:
        return len(read_dead_letters(settings, 10, 0.5)) == 1

    apply_until(dead)
    listed = cli("dead-letters", "journal")
    assert listed.returncode == 0, listed.stderr
    assert url in listed.stdout and "REVISIT_ALLOWED_INTERNAL_HOSTS" in listed.stdout
    internal_hosts(["10.9.8.7"])
    replayed = cli("dead-letters", "journal", "--replay")
    assert "replayed 1" in replayed.stdout
    stats = "select last_visit_status::text as s from origin_visit_stats where url = %s"
    apply_until(lambda: conn.execute(stats, (url,)).fetchone() == {"s": "full"})
    paused = conn.execute("select enabled from visit_types where name = 'zzz'").fetchone()
    assert paused == {"enabled": False}


def test_a_replay_the_journal_topic_refuses_ends_in_one_line_naming_the_refusal_and_setting(
    settings: Settings,
) -> None:
    from app.kafka.client import Record, ResilientProducer

    letter = Record(settings.dead_letter_topic, b"{}", b"k", [("reason", "refused")])
    ResilientProducer(settings).send([letter])
    wait_for(lambda: len(read_dead_letters(settings, 10, 0.5)) == 1, 30, "the dead letter")
    # A topic name the broker refuses ("Broker: Invalid topic").
    refused = cli("dead-letters", "journal", "--replay", env={"REVISIT_JOURNAL_TOPIC": "a b"})
    assert refused.returncode == 3
    assert "1 dead letter(s)" in refused.stdout and "replayed" not in refused.stdout
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"error: --replay: Kafka at {settings.kafka_brokers} refused: "), line
    assert "Broker: Invalid topic (check REVISIT_JOURNAL_TOPIC (a b):" in line, line
    assert line.endswith(f"the dead letters stay in {settings.dead_letter_topic}"), line
    assert "REVISIT_KAFKA_BROKERS" not in line, line
    assert len(read_dead_letters(settings, 10, 0.5)) == 1


def test_a_replay_to_a_topic_the_broker_refuses_fails_at_once_naming_the_refusal(
    settings: Settings,
) -> None:
    letter = JournalDeadLetter(0, 0, "refused", "?", b"k", b"{}")
    refused = settings.model_copy(update={"journal_topic": "a b"})
    started = time.monotonic()
    with pytest.raises(PublishRefused, match="Broker: Invalid topic"):
        replay(refused, [letter])
    assert time.monotonic() - started < 5


def test_a_journal_status_refused_for_its_credentials_is_dead_lettered_without_them(
    settings: Settings,
) -> None:
    from actors.journal import JournalClient
    from app.kafka.client import StatusPublisher
    from app.kafka.codec import decode

    client = JournalClient(settings)
    StatusPublisher(settings).publish(
        "https://alice:s3cret@example.org/x.git", "git", 1, "full", None
    )

    def dead() -> bool:
        messages = client.poll_batch()
        if messages:
            client.process(messages, datetime.now(tz=UTC))
        return len(read_dead_letters(settings, 10, 0.5)) == 1

    wait_for(dead, 30, "the journal client")
    [letter] = read_dead_letters(settings, 10, 0.5)

    assert letter.reason.startswith("origin:")
    assert b"s3cret" not in (letter.value or b"") + (letter.key or b"") + letter.reason.encode()
    assert decode(letter.value)["origin"] == "https://***@example.org/x.git"
    assert decode(letter.key)["origin"] == "https://***@example.org/x.git"
