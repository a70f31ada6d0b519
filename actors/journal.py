"""The journal client process: origin_visit_status messages from Kafka to the stats.

Per batch: decode and validate, dead-letter what is malformed, fold into the
stats in one Postgres transaction, re-place the changed origins in Redis, and
only then commit the Kafka offsets (DESIGN invariant 4). A crash anywhere
re-processes at most the uncommitted batch, which changes nothing twice.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from app.context import Context
from app.db.connection import connect
from app.db.scheduling import visit_type_configs
from app.journal import BatchOutcome, apply_events_batch, decode_batch
from app.kafka import make_consumer, producer_config
from app.settings import Settings
from monitoring.metrics import (
    JOURNAL_BATCH_SECONDS,
    JOURNAL_DEAD_LETTERS,
    JOURNAL_MESSAGES,
    JOURNAL_OUTCOMES,
    REQUEST_LATENCY,
)

log = logging.getLogger("revisit.journal")


def ensure_topics(settings: Settings, partitions: int = 4, timeout_s: float = 30.0) -> None:
    """Create the journal and dead-letter topics if the broker lacks them."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_brokers, "log_level": 3})
    existing = admin.list_topics(timeout=timeout_s).topics
    missing = [
        NewTopic(name, num_partitions=partitions, replication_factor=1)
        for name in (settings.journal_topic, settings.dead_letter_topic)
        if name not in existing
    ]
    if not missing:
        return
    for name, future in admin.create_topics(missing, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # already created by a concurrent process
            if "exist" not in str(exc).lower():
                raise
            log.debug("topic %s already exists", name)


def next_offsets(messages: list[Message]) -> list[TopicPartition]:
    """The offsets to commit after ``messages``: one past the last of each partition."""
    last: dict[tuple[str, int], int] = {}
    for m in messages:
        key = (str(m.topic()), int(m.partition() or 0))
        last[key] = max(last.get(key, -1), int(m.offset() or 0))
    return [TopicPartition(t, p, o + 1) for (t, p), o in sorted(last.items())]


def reason_label(reason: str) -> str:
    """The field a rejection names, a bounded label for the dead-letter counter."""
    return reason.split(":", 1)[0]


class JournalClient:
    """Consumes the journal topic in batches within a consumer group."""

    def __init__(self, settings: Settings, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.ctx = Context.from_settings(settings)
        self.conn = connect(settings)
        self.rng = rng or random.Random()
        ensure_topics(settings)
        self.consumer = make_consumer(settings)
        self.dead_letters = Producer(producer_config(settings))
        self.consumer.subscribe([settings.journal_topic])

    def poll_batch(self) -> list[Message]:
        """The next batch of messages (possibly empty)."""
        messages = self.consumer.consume(
            self.settings.journal_batch_size, timeout=self.settings.journal_batch_timeout_s
        )
        good = []
        for message in messages:
            error = message.error()
            if error is None:
                good.append(message)
            elif error.code() != KafkaError._PARTITION_EOF:
                log.warning("kafka: %s", error)
        return good

    def process(self, messages: list[Message], now: datetime) -> BatchOutcome:
        """Apply one batch, dead-letter its bad messages, then commit its offsets."""
        configs = visit_type_configs(self.conn)
        events, rejected = decode_batch([m.value() for m in messages], frozenset(configs))
        for bad in rejected:
            self._dead_letter(messages[bad.index], bad.reason)
        outcome = apply_events_batch(self.conn, self.ctx, events, configs, now, self.rng)
        outcome.rejected = rejected
        if rejected:
            self.dead_letters.flush(30)
        if messages:
            self.consumer.commit(offsets=next_offsets(messages), asynchronous=False)
        for (status, visit_type), count in Counter(
            (e.status, e.visit_type) for e in events
        ).items():
            JOURNAL_MESSAGES.labels(status, visit_type).inc(count)
        for request in outcome.finished_requests:
            REQUEST_LATENCY.labels(request.kind, request.visit_type).observe(request.latency_s)
        for (kind, visit_type), count in outcome.outcomes.items():
            if count:
                JOURNAL_OUTCOMES.labels(kind, visit_type).inc(count)
        return outcome

    def _dead_letter(self, message: Message, reason: str) -> None:
        headers: list[tuple[str, Any]] = [
            ("reason", reason.encode()),
            ("source_topic", str(message.topic()).encode()),
            ("source_partition", str(message.partition()).encode()),
            ("source_offset", str(message.offset()).encode()),
        ]
        self.dead_letters.produce(
            self.settings.dead_letter_topic,
            value=message.value(),
            key=message.key(),
            headers=headers,
        )
        JOURNAL_DEAD_LETTERS.labels(reason_label(reason)).inc()
        log.warning(
            "dead-lettered message at %s[%s]@%s: %s",
            message.topic(),
            message.partition(),
            message.offset(),
            reason,
        )

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set, then leave the group cleanly."""
        try:
            while not stop.is_set():
                messages = self.poll_batch()
                if not messages:
                    continue
                started = time.monotonic()
                outcome = self.process(messages, datetime.now(tz=UTC))
                JOURNAL_BATCH_SECONDS.observe(time.monotonic() - started)
                log.info(
                    "applied %d statuses (%d origins changed, %d dead-lettered)",
                    len(outcome.applied),
                    len(outcome.changed),
                    len(outcome.rejected),
                )
        finally:
            self.consumer.close()
            self.dead_letters.flush(10)
