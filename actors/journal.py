"""The journal client process: origin_visit_status messages from Kafka to the stats.

Per batch: decode and validate, fold into the stats in one Postgres
transaction, dead-letter what is malformed, re-place the written origins in
Redis, and only then commit the Kafka offsets (DESIGN invariant 4). A crash
anywhere re-processes at most the uncommitted batch, which the fold absorbs
(invariant 3). Losing PostgreSQL pauses the client, which reconnects with
backoff and retries the same batch, rather than exiting.
"""

from __future__ import annotations

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
import redis
from confluent_kafka import Consumer, KafkaException, Message

from actors.journal_consumer import JournalConsumer
from app.context import Context
from app.db.connection import DictConnection, connect
from app.db.errors import is_refused_value, is_unavailable
from app.db.scheduling import visit_type_configs
from app.domain.backoff import Backoff
from app.domain.journal_event import VisitStatusEvent
from app.domain.placement import MirrorRow
from app.domain.visit_stats import Fudge, keyed_fudge
from app.journal import BatchOutcome, Rejected, decode_batch, place_rows, write_batch
from app.kafka import PublishError, Record, ResilientProducer
from app.settings import Settings
from monitoring.metrics import (
    JOURNAL_BATCH_MESSAGES,
    JOURNAL_BATCH_RETRIES,
    JOURNAL_BATCH_SECONDS,
    JOURNAL_BEYOND_HISTORY,
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
#: What a batch is retried after, as the label of JOURNAL_BATCH_RETRIES.
RETRIED_FAULTS: tuple[tuple[type[BaseException], str], ...] = (
    (redis.RedisError, "redis"),
    (PublishError, "kafka"),
    (KafkaException, "kafka"),
    (psycopg.Error, "database"),
)


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
        self.kafka = JournalConsumer(settings)
        self.dead_letters = ResilientProducer(settings, self.stop)

    @property
    def consumer(self) -> Consumer:
        """The Kafka consumer now in use (the watchdog may replace it)."""
        return self.kafka.consumer

    def poll_batch(self) -> list[Message]:
        """The next batch of messages (possibly empty)."""
        return self.kafka.poll()

    def process(self, messages: list[Message], now: datetime) -> BatchOutcome:
        """Apply one batch, dead-letter its bad messages, re-place, then commit offsets."""
        payloads = [m.value() for m in messages]
        try:
            outcome, rows = self._with_database(self._transaction(payloads, now))
        except psycopg.Error as exc:
            if not is_refused_value(exc):
                raise
            # A value PostgreSQL refuses got past validation: find it, alone.
            log.warning("batch refused by PostgreSQL (%s); applying it message by message", exc)
            outcome, rows = self._one_by_one(payloads, now)
        self._transactions += 1
        if self._exit_after and self._transactions >= self._exit_after:
            os._exit(EXIT_AFTER_TRANSACTIONS_CODE)
        self._dead_letter([(messages[bad.index], bad.reason) for bad in outcome.rejected])
        outcome.placed = place_rows(self.ctx, rows, now)
        self.kafka.commit(messages)
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
            except psycopg.Error as exc:
                if not is_refused_value(exc):
                    raise
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
                if not is_unavailable(exc):
                    raise  # a refused value: the caller dead-letters it
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

    def _dead_letter(self, rejected: list[tuple[Message, str]]) -> None:
        """Send rejected messages to the dead-letter topic with their reason, and wait
        for the broker's acknowledgement (PublishError: the batch is retried)."""
        if not rejected:
            return
        records = [
            Record(
                self.settings.dead_letter_topic,
                message.value(),
                message.key(),
                [
                    ("reason", reason.encode()),
                    ("source_topic", str(message.topic()).encode()),
                    ("source_partition", str(message.partition()).encode()),
                    ("source_offset", str(message.offset()).encode()),
                ],
            )
            for message, reason in rejected
        ]
        self.dead_letters.send(records)
        for message, reason in rejected:
            JOURNAL_DEAD_LETTERS.labels(reason_label(reason)).inc()
            log.warning(
                "dead-lettered message at %s[%s]@%s: %s",
                message.topic(),
                message.partition(),
                message.offset(),
                reason[:500],
            )

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set, then leave the group cleanly.

        A batch that fails because PostgreSQL, Redis or the broker is away is
        retried, the same messages, with bounded backoff: its offsets are not
        committed, and no later batch is taken before it is applied.
        """
        self.stop = self.dead_letters.stop = stop
        backoff = Backoff(0.5, MAX_RECONNECT_DELAY_S)
        pending: list[Message] = []
        try:
            while not stop.is_set():
                pending = pending or self.poll_batch()
                if not pending:
                    continue
                try:
                    self._apply(pending)
                except Exception as exc:
                    delay = backoff.next_delay_s()
                    self._log_retry(exc, delay)
                    stop.wait(delay)
                    continue
                backoff.reset()
                pending = []
        finally:
            self.close()

    def _apply(self, messages: list[Message]) -> None:
        started = time.monotonic()
        outcome = self.process(messages, datetime.now(tz=UTC))
        JOURNAL_BATCH_SECONDS.observe(time.monotonic() - started)
        log.info(
            "applied %d statuses (%d origins written, %d dead-lettered)",
            len(outcome.applied),
            len(outcome.written),
            len(outcome.rejected),
        )

    def _log_retry(self, exc: Exception, delay_s: float) -> None:
        cause = next((label for kind, label in RETRIED_FAULTS if isinstance(exc, kind)), None)
        JOURNAL_BATCH_RETRIES.labels(cause or "error").inc()
        if cause is None:
            log.exception("batch failed; retrying it in %.1fs", delay_s)
        else:
            log.warning("batch failed, %s unavailable (%s); retrying in %.1fs", cause, exc, delay_s)

    def close(self) -> None:
        """Leave the consumer group and release the connections."""
        self.kafka.close()
        # Dead letters still unacknowledged belong to a batch whose offsets were
        # not committed: it is read again after the restart, so they can go.
        self.dead_letters.discard()
        for index in range(len(self.conns)):
            self._drop_connection(index)
        self._pool.shutdown(wait=False, cancel_futures=True)
