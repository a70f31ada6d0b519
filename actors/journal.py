"""The journal client process: origin_visit_status messages from Kafka to the stats.

Per batch: decode and validate, fold into the stats in one Postgres
transaction, dead-letter what is malformed, re-place the written origins in
Redis, and only then commit the Kafka offsets (DESIGN invariant 4). While a
batch is re-placed in Redis, the next one is read and written to PostgreSQL
(the two servers work at once); placements and commits keep the batches'
order. A crash anywhere re-processes at most the uncommitted batches, which
the fold absorbs (invariant 3). Losing PostgreSQL or Redis pauses the client,
which reconnects with backoff and retries where it stopped, rather than
exiting.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import TypeVar

import psycopg

from actors.journal_consumer import JournalConsumer
from actors.loop import run_every
from app.db.connection import Connections, DictConnection
from app.domain.placement import MirrorRow
from app.kafka.client import Consumer, Message, Record, ResilientProducer, is_kafka_error
from app.kafka.codec import without_credentials
from app.services.context import Context
from app.services.journal import BatchOutcome
from app.services.journal_batch import BatchWriter
from app.services.mirror_sync import place_rows
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
from queues.errors import RedisError

#: PostgreSQL connections writing a journal batch, each a share of its origins.
JOURNAL_WRITERS = 2

log = logging.getLogger("revisit.journal")
T = TypeVar("T")
#: The labels of JOURNAL_MESSAGES of one applied status.
_STATUS_AND_TYPE = attrgetter("status", "visit_type")


def fault_label(exc: BaseException) -> str | None:
    """The server a failed batch blames, as the label of JOURNAL_BATCH_RETRIES (None:
    a bug)."""
    if isinstance(exc, RedisError):
        return "redis"
    if is_kafka_error(exc):
        return "kafka"
    return "database" if isinstance(exc, psycopg.Error) else None


#: Allocations between two collections of the youngest generation in the
#: journal process (Python's default: 700). A batch allocates hundreds of
#: thousands of short-lived objects and makes no reference cycles, so at the
#: default the collector ran every few hundred rows and re-scanned the whole
#: batch each time, a large share of the process's CPU for nothing.
JOURNAL_GC_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect garbage in the journal process as its batches call for: rarely,
    and never re-scanning what was loaded at start."""
    gc.freeze()
    gc.set_threshold(JOURNAL_GC_THRESHOLD, 20, 10)


def reason_label(reason: str) -> str:
    """The field a rejection names, a bounded label for the dead-letter counter."""
    return reason.split(":", 1)[0]


@dataclass
class WrittenBatch:
    """A batch committed to PostgreSQL, its origins not yet re-placed in Redis
    nor its offsets committed."""

    messages: list[Message]
    outcome: BatchOutcome
    rows: list[MirrorRow]
    started: float


class JournalClient:
    """Consumes the journal topic in batches within a consumer group."""

    def __init__(
        self,
        settings: Settings,
        after_transaction: Callable[[], None] = lambda: None,
    ) -> None:
        """``after_transaction`` is called after each batch's transactions commit and
        before Redis and the offsets are touched (tests crash the process there)."""
        self.settings = settings
        self.ctx = Context.from_settings(settings)
        self.stop = threading.Event()
        self.connections = Connections(settings, JOURNAL_WRITERS)
        self.batch = BatchWriter(self.ctx, self._run, JOURNAL_WRITERS)
        self.after_transaction = after_transaction
        self.kafka = JournalConsumer(settings)
        self.dead_letters = ResilientProducer(settings, self.stop)
        #: Re-places a written batch in Redis while the next one is written.
        self._placer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-place")

    def _run(self, work: Callable[[DictConnection], T]) -> T:
        """Run ``work`` on a connection of its own, waiting out a PostgreSQL outage."""
        return self.connections.run(
            work,
            wait=lambda delay_s: self.stop.wait(delay_s),
            on_retry=lambda cause: JOURNAL_DATABASE_RETRIES.labels(cause).inc(),
        )

    @property
    def consumer(self) -> Consumer:
        """The Kafka consumer now in use (the watchdog may replace it)."""
        return self.kafka.consumer

    def poll_batch(self, timeout_s: float | None = None) -> list[Message]:
        """The next batch of messages (possibly empty), waiting at most ``timeout_s``
        (by default the consumer's) for a full one."""
        return self.kafka.poll(timeout_s)

    def process(self, messages: list[Message], now: datetime) -> BatchOutcome:
        """Apply one batch, dead-letter its bad messages, re-place, then commit offsets."""
        written = self.write(messages, now)
        written.outcome.placed = self.place(written, now)
        self.finish(written)
        return written.outcome

    def write(self, messages: list[Message], now: datetime) -> WrittenBatch:
        """Fold one batch into PostgreSQL and dead-letter its bad messages."""
        started = time.monotonic()
        outcome, rows = self.batch.write([m.value() for m in messages], now)
        self.after_transaction()
        self._dead_letter([(messages[bad.index], bad.reason) for bad in outcome.rejected])
        return WrittenBatch(messages, outcome, rows, started)

    def place(self, written: WrittenBatch, now: datetime) -> int:
        """Re-place a written batch's origins in Redis; how many moved."""
        return place_rows(self.ctx, written.rows, now)

    def finish(self, written: WrittenBatch) -> None:
        """Commit a placed batch's offsets and count what it did."""
        self.kafka.commit(written.messages)
        self._count(written.outcome, len(written.messages))
        JOURNAL_BATCH_SECONDS.observe(time.monotonic() - written.started)
        log.info(
            "applied %d statuses (%d origins written, %d dead-lettered)",
            len(written.outcome.applied),
            len(written.outcome.written),
            len(written.outcome.rejected),
        )

    def _count(self, outcome: BatchOutcome, size: int) -> None:
        JOURNAL_BATCH_MESSAGES.observe(size)
        statuses = Counter(map(_STATUS_AND_TYPE, outcome.applied))
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
        for the broker's acknowledgement (PublishError: the batch is retried).
        The credentials of their URLs are not kept (a status whose URL has them is
        refused, and would be again)."""
        if not rejected:
            return
        records = [
            Record(
                self.settings.dead_letter_topic,
                without_credentials(message.value()),
                without_credentials(message.key()),
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

        Each step re-places the oldest written batch in Redis (on the placer
        thread) while it reads and writes the next batch to PostgreSQL, at most
        two batches ahead of the last commit. A step that fails because
        PostgreSQL, Redis or the broker is away is retried with bounded backoff
        (``actors.loop``) from where it stopped: a polled batch not yet written
        is written, a written batch not yet placed is placed, and no offset is
        committed before its batch and every earlier one are placed.
        """
        self.stop = self.dead_letters.stop = stop
        pending: list[Message] = []
        written: deque[WrittenBatch] = deque()

        def step(now: datetime) -> None:
            nonlocal pending
            placing: Future[int] | None = None
            if written:
                placing = self._placer.submit(self.place, written[0], now)
            try:
                if len(written) < 2:
                    # What has arrived, without waiting while a batch waits for
                    # its commit: at a low rate the commit would wait for the poll.
                    pending = pending or self.poll_batch(0.0 if placing else None)
                    if pending:
                        written.append(self._failing_counted(self.write, pending, now))
                        pending = []
            finally:
                if placing is not None:
                    done = written[0]
                    done.outcome.placed = self._failing_counted(placing.result)
                    written.popleft()
                    self.finish(done)

        try:
            run_every(step, 0.0, stop, log, "batch", server_of=fault_label)
            self._drain(written)
        finally:
            self.close()

    @staticmethod
    def _failing_counted(work: Callable[..., T], *args: object) -> T:
        """``work(*args)``, counting its failure in JOURNAL_BATCH_RETRIES."""
        try:
            return work(*args)
        except Exception as exc:
            JOURNAL_BATCH_RETRIES.labels(fault_label(exc) or "error").inc()
            raise

    def _drain(self, written: deque[WrittenBatch]) -> None:
        """Place and commit the written batches at stop (once: whatever fails is
        read again after the restart)."""
        try:
            while written:
                done = written.popleft()
                done.outcome.placed = self.place(done, datetime.now(tz=UTC))
                self.finish(done)
        except Exception as exc:
            log.warning("written batches left uncommitted at stop (%s); they will be replayed", exc)

    def close(self) -> None:
        """Leave the consumer group and release the connections."""
        self.kafka.close()
        # Dead letters still unacknowledged belong to a batch whose offsets were
        # not committed: it is read again after the restart, so they can go.
        self.dead_letters.discard()
        self.batch.close()
        self._placer.shutdown(wait=True)
        self.connections.close()
