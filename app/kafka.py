"""Kafka adapter: producer and consumer settings, publishing visit statuses, and
reading the journal's dead-letter topic."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from app.journal_codec import encode, visit_status_key, visit_status_value
from app.settings import Settings

#: How long a repeated librdkafka message (same facility) stays silent.
KAFKA_LOG_REPEAT_S = 60.0


class OncePer(logging.Filter):
    """Lets one librdkafka message per facility through every ``interval_s``: an
    unreachable broker is one line a minute naming the setting, not ~18 a second."""

    def __init__(self, interval_s: float, hint: str) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.hint = hint
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether to log ``record`` (adding the hint to what it says)."""
        facility = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(facility, -self.interval_s) < self.interval_s:
                return False
            self._last[facility] = now
        record.msg = f"{record.msg} ({self.hint}; repeats silenced for {self.interval_s:g}s)"
        return True


def kafka_logger(settings: Settings) -> logging.Logger:
    """The logger librdkafka clients report to (config key ``logger``), quietened."""
    logger = logging.getLogger("revisit.kafka")
    if not logger.filters:
        hint = f"REVISIT_KAFKA_BROKERS is {settings.kafka_brokers}"
        logger.addFilter(OncePer(KAFKA_LOG_REPEAT_S, hint))
    return logger


def producer_config(settings: Settings) -> dict[str, Any]:
    """A producer that waits for the broker's acknowledgement and does not duplicate."""
    return {
        "bootstrap.servers": settings.kafka_brokers,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "log_level": 3,
        "logger": kafka_logger(settings),
    }


def consumer_config(settings: Settings) -> dict[str, Any]:
    """A group consumer that never commits on its own: offsets follow Postgres commits."""
    session = settings.kafka_session_timeout_ms
    return {
        "bootstrap.servers": settings.kafka_brokers,
        "group.id": settings.journal_group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": session,
        "heartbeat.interval.ms": max(100, session // 10),
        "log_level": 3,
        "logger": kafka_logger(settings),
    }


def make_consumer(settings: Settings) -> Consumer:
    """A consumer subscribed to nothing yet."""
    return Consumer(consumer_config(settings))


class StatusPublisher:
    """Publishes origin_visit_status records as the archive's loaders do."""

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.journal_topic
        self.producer = Producer(producer_config(settings))

    def publish(
        self,
        origin: str,
        visit_type: str,
        visit: int,
        status: str,
        snapshot: bytes | None,
        metadata: dict[str, Any] | None = None,
        date: datetime | None = None,
        flush_timeout_s: float = 30.0,
    ) -> None:
        """Publish one status and wait until the broker has it."""
        date = date or datetime.now(tz=UTC)
        value = visit_status_value(origin, visit, date, status, snapshot, visit_type, metadata)
        self.producer.produce(
            self.topic, value=encode(value), key=visit_status_key(origin, visit, date)
        )
        remaining = self.producer.flush(flush_timeout_s)
        if remaining:
            raise RuntimeError(
                f"journal publish of {origin} not acknowledged in {flush_timeout_s}s"
            )


@dataclass(frozen=True)
class JournalDeadLetter:
    """A journal message the journal client could not apply, and why."""

    partition: int
    offset: int
    reason: str
    source: str
    key: bytes | None
    value: bytes | None


def read_dead_letters(settings: Settings, limit: int, idle_s: float) -> list[JournalDeadLetter]:
    """The first ``limit`` messages of the dead-letter topic, read without a
    consumer group's commit (reading changes nothing); stops after ``idle_s``
    without a message."""
    # A command says in one line when the broker is unreachable: librdkafka stays quiet.
    group = f"revisit-cli-{uuid.uuid4().hex}"
    config = {**consumer_config(settings), "group.id": group, "log_level": 0}
    consumer = Consumer(config)
    try:
        topic = settings.dead_letter_topic
        metadata = consumer.list_topics(topic, timeout=5)
        partitions = metadata.topics[topic].partitions if topic in metadata.topics else {}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        found: list[JournalDeadLetter] = []
        while partitions and len(found) < limit:
            message = consumer.poll(idle_s)
            if message is None:
                break
            if message.error():
                continue
            headers = _headers(message.headers())
            source = "{}[{}]@{}".format(
                headers.get("source_topic", "?"),
                headers.get("source_partition", "?"),
                headers.get("source_offset", "?"),
            )
            found.append(
                JournalDeadLetter(
                    message.partition() or 0,
                    message.offset() or 0,
                    headers.get("reason", "(no reason)"),
                    source,
                    message.key(),
                    message.value(),
                )
            )
        return found
    finally:
        consumer.close()


def _headers(raw: Any) -> dict[str, str]:
    pairs: list[tuple[str, bytes | None]] = list(raw or [])
    return {k: v.decode(errors="replace") for k, v in pairs if v is not None}


def replay(settings: Settings, letters: list[JournalDeadLetter]) -> None:
    """Publish dead letters to the journal topic again (the journal's processing
    is idempotent, so a message replayed twice counts once)."""
    producer = Producer(producer_config(settings))
    for letter in letters:
        producer.produce(settings.journal_topic, value=letter.value, key=letter.key)
    if producer.flush(30):
        raise RuntimeError("replayed messages not acknowledged in 30 s")
