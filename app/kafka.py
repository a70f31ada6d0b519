"""Kafka adapter: producer and consumer settings, and publishing visit statuses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, Producer

from app.journal_codec import encode, visit_status_key, visit_status_value
from app.settings import Settings


def producer_config(settings: Settings) -> dict[str, Any]:
    """A producer that waits for the broker's acknowledgement and does not duplicate."""
    return {
        "bootstrap.servers": settings.kafka_brokers,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "log_level": 3,
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
