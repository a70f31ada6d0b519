"""The journal client process: origin_visit_status messages from Kafka to the stats.

Per batch: decode and validate, fold into the stats in one Postgres
transaction, dead-letter what is malformed, re-place the written origins in
Redis, and only then commit the Kafka offsets (DESIGN invariant 4). A crash
anywhere re-processes at most the uncommitted batch, which the fold absorbs
(invariant 3). Losing PostgreSQL pauses the client, which reconnects with
backoff and retries the same batch, rather than exiting.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from app.context import Context
from app.db.connection import DictConnection, connect
from app.db.scheduling import visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.domain.placement import MirrorRow
from app.domain.visit_stats import Fudge, keyed_fudge
from app.journal import BatchOutcome, Rejected, decode_batch, place_rows, write_batch
from app.kafka import kafka_logger, make_consumer, producer_config
from app.settings import Settings
from monitoring.metrics import (
    JOURNAL_BATCH_MESSAGES,
    JOURNAL_BATCH_SECONDS,
    JOURNAL_BEYOND_HISTORY,
    JOURNAL_CONSUMER_LAG,
    JOURNAL_DATABASE_RETRIES,
    JOURNAL_DEAD_LETTERS,
    JOURNAL_MESSAGES,
    JOURNAL_OUTCOMES,
    REQUEST_LATENCY,
)

log = logging.getLogger("revisit.journal")
T = TypeVar("T")

# Test hook: exit abruptly right after the Nth transaction commits, before
# Redis and the offset commit, to prove a crash there is harmless.
EXIT_AFTER_TRANSACTIONS_ENV = "REVISIT_JOURNAL_TEST_EXIT_AFTER_TRANSACTIONS"
EXIT_AFTER_TRANSACTIONS_CODE = 75
MAX_RECONNECT_DELAY_S = 30.0


def ensure_topics(settings: Settings, partitions: int = 4, timeout_s: float = 30.0) -> None:
    """Create the journal and dead-letter topics if the broker lacks them."""
    config: dict[str, Any] = {"bootstrap.servers": settings.kafka_brokers, "log_level": 3}
    admin = AdminClient({**config, "logger": kafka_logger(settings)})  # type: ignore[dict-item]
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


def split_by_origin(events: list[VisitStatusEvent], parts: int) -> list[list[VisitStatusEvent]]:
    """Events in ``parts`` groups with no origin in two groups (empty groups dropped)."""
    if parts <= 1:
        return [events]
    groups: list[list[VisitStatusEvent]] = [[] for _ in range(parts)]
    for event in events:
        key = f"{event.origin}\x00{event.visit_type}".encode()
        groups[zlib.crc32(key) % parts].append(event)
    return [g for g in groups if g] or [events]


def merge_outcomes(
    results: list[tuple[BatchOutcome, list[MirrorRow]]],
) -> tuple[BatchOutcome, list[MirrorRow]]:
    """One outcome for a batch written as several groups."""
    total = BatchOutcome()
    rows: list[MirrorRow] = []
    for outcome, written in results:
        total.applied += outcome.applied
        total.written += outcome.written
        total.outcomes.update(outcome.outcomes)
        total.beyond_history.update(outcome.beyond_history)
        total.finished_requests += outcome.finished_requests
        rows += written
    return total, rows


class JournalClient:
    """Consumes the journal topic in batches within a consumer group."""

    def __init__(self, settings: Settings, fudge: Fudge | None = None) -> None:
        self.settings = settings
        self.ctx = Context.from_settings(settings)
        self.fudge = fudge or keyed_fudge()
        self.stop = threading.Event()
        self.conns: list[DictConnection | None] = [None] * settings.journal_writers
        self._pool = ThreadPoolExecutor(max_workers=max(1, settings.journal_writers - 1))
        self._transactions = 0
        self._exit_after = int(os.environ.get(EXIT_AFTER_TRANSACTIONS_ENV, "0") or 0)
        ensure_topics(settings)
        self.consumer: Consumer = make_consumer(settings)
        self.dead_letters = Producer(producer_config(settings))
        self.consumer.subscribe([settings.journal_topic], on_revoke=self._on_revoke)

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
        """Apply one batch, dead-letter its bad messages, re-place, then commit offsets."""
        payloads = [m.value() for m in messages]
        try:
            outcome, rows = self._with_database(self._transaction(payloads, now))
        except psycopg.DataError as exc:
            # A value PostgreSQL refuses got past validation: find it, alone.
            log.warning("batch refused by PostgreSQL (%s); applying it message by message", exc)
            outcome, rows = self._one_by_one(payloads, now)
        self._transactions += 1
        if self._exit_after and self._transactions >= self._exit_after:
            os._exit(EXIT_AFTER_TRANSACTIONS_CODE)
        for bad in outcome.rejected:
            self._dead_letter(messages[bad.index], bad.reason)
        if outcome.rejected and self.dead_letters.flush(30):
            raise RuntimeError("dead letters not acknowledged; the batch will be replayed")
        outcome.placed = place_rows(self.ctx, rows, now)
        self._commit(messages)
        self._count(outcome, len(messages))
        return outcome

    def _transaction(
        self, payloads: list[bytes | None], now: datetime
    ) -> Callable[[DictConnection], tuple[BatchOutcome, list[MirrorRow]]]:
        def transaction(conn: DictConnection) -> tuple[BatchOutcome, list[MirrorRow]]:
            configs = visit_type_configs(conn)
            events, rejected = decode_batch(payloads, frozenset(configs))
            groups = split_by_origin(events, len(self.conns))
            if len(groups) == 1:
                outcome, rows = write_batch(conn, self.ctx, events, configs, now, self.fudge)
            else:
                outcome, rows = self._write_groups(conn, groups, configs, now)
            outcome.rejected = rejected
            return outcome, rows

        return transaction

    def _write_groups(
        self,
        conn: DictConnection,
        groups: list[list[VisitStatusEvent]],
        configs: dict[str, Any],
        now: datetime,
    ) -> tuple[BatchOutcome, list[MirrorRow]]:
        """Write disjoint groups of origins in parallel transactions, one per
        connection, so PostgreSQL works on several cores; the offsets are
        committed only after every group's transaction committed."""

        def on(index: int, group: list[VisitStatusEvent]) -> tuple[BatchOutcome, list[MirrorRow]]:
            return self._with_database(
                lambda c: write_batch(c, self.ctx, group, configs, now, self.fudge), index
            )

        futures = [self._pool.submit(on, i, g) for i, g in enumerate(groups[1:], start=1)]
        results = [write_batch(conn, self.ctx, groups[0], configs, now, self.fudge)]
        results += [f.result() for f in futures]
        return merge_outcomes(results)

    def _one_by_one(
        self, payloads: list[bytes | None], now: datetime
    ) -> tuple[BatchOutcome, list[MirrorRow]]:
        total = BatchOutcome()
        rows: list[MirrorRow] = []
        for index, payload in enumerate(payloads):
            try:
                outcome, written = self._with_database(self._transaction([payload], now))
            except psycopg.DataError as exc:
                total.rejected.append(Rejected(index, f"database: {exc}"))
                continue
            total.applied += outcome.applied
            total.written += outcome.written
            total.rejected += [Rejected(index, r.reason) for r in outcome.rejected]
            total.outcomes.update(outcome.outcomes)
            total.beyond_history.update(outcome.beyond_history)
            rows += written
        return total, rows

    def _with_database(self, work: Callable[[DictConnection], T], index: int = 0) -> T:
        """Run ``work`` on live connection ``index``, reconnecting and retrying until
        it succeeds."""
        delay_s = 0.5
        while True:
            try:
                conn = self.conns[index]
                if conn is None or conn.closed:
                    conn = self.conns[index] = connect(self.settings)
                return work(conn)
            except psycopg.errors.TransactionRollback as exc:
                # A deadlock or serialization failure with another journal
                # client: the transaction was rolled back, just retry it.
                JOURNAL_DATABASE_RETRIES.labels("conflict").inc()
                log.info("retrying the batch after a conflict: %s", exc)
            except psycopg.OperationalError as exc:
                JOURNAL_DATABASE_RETRIES.labels("reconnect").inc()
                log.warning("PostgreSQL unavailable (%s); retrying in %.1fs", exc, delay_s)
                self._drop_connection(index)
                if self.stop.wait(delay_s):
                    raise
                delay_s = min(delay_s * 2, MAX_RECONNECT_DELAY_S)

    def _drop_connection(self, index: int = 0) -> None:
        conn = self.conns[index]
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("closing a broken connection failed", exc_info=True)
        self.conns[index] = None

    def _commit(self, messages: list[Message]) -> None:
        offsets = next_offsets(messages)
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Typically a rebalance took the partitions away: their new owner
            # replays from the last committed offsets, which changes nothing.
            log.warning("offset commit failed (%s); the batch will be replayed", exc)
            return
        for tp in offsets:
            _low, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and high >= 0:
                JOURNAL_CONSUMER_LAG.labels(str(tp.partition)).set(max(0, high - tp.offset))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            with contextlib.suppress(KeyError):
                JOURNAL_CONSUMER_LAG.remove(str(tp.partition))

    def _count(self, outcome: BatchOutcome, size: int) -> None:
        JOURNAL_BATCH_MESSAGES.observe(size)
        statuses = Counter((e.status, e.visit_type) for e in outcome.applied)
        for (status, visit_type), count in statuses.items():
            JOURNAL_MESSAGES.labels(status, visit_type).inc(count)
        for request in outcome.finished_requests:
            REQUEST_LATENCY.labels(request.kind, request.visit_type).observe(request.latency_s)
        for (kind, visit_type), count in outcome.outcomes.items():
            JOURNAL_OUTCOMES.labels(kind, visit_type).inc(count)
        for visit_type, count in outcome.beyond_history.items():
            JOURNAL_BEYOND_HISTORY.labels(visit_type).inc(count)

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
        self.stop = stop
        try:
            while not stop.is_set():
                messages = self.poll_batch()
                if not messages:
                    continue
                started = time.monotonic()
                outcome = self.process(messages, datetime.now(tz=UTC))
                JOURNAL_BATCH_SECONDS.observe(time.monotonic() - started)
                log.info(
                    "applied %d statuses (%d origins written, %d dead-lettered)",
                    len(outcome.applied),
                    len(outcome.written),
                    len(outcome.rejected),
                )
        finally:
            self.close()

    def close(self) -> None:
        """Leave the consumer group and release the connections."""
        self.consumer.close()
        self.dead_letters.flush(10)
        self._drop_connection()
