"""Kafka adapter: producer and consumer settings, topics, publishing visit statuses,
and reading the journal's dead-letter topic."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Producer

# The client's types, for the journal process: only app.kafka imports confluent_kafka.
from confluent_kafka import Consumer as Consumer
from confluent_kafka import KafkaError as KafkaError
from confluent_kafka import Message as Message
from confluent_kafka import TopicPartition as TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from app.kafka.codec import encode, visit_status_key, visit_status_value
from app.settings import Settings

#: The journal consumer's group session timeout.
SESSION_TIMEOUT_MS = 10000

#: Wait for the broker's acknowledgement this long before replacing the producer.
PUBLISH_ATTEMPT_S = 5.0
#: Give up publishing after this long (the broker away).
PUBLISH_TIMEOUT_S = 120.0

log = logging.getLogger("revisit.kafka.client")
#: Pause between two publish attempts that failed at once (not by a timeout).
RETRY_PAUSE_S = 1.0
#: Longest a blocking wait goes without looking at the stop signal.
STOP_CHECK_S = 0.25
#: Longest wait for the first dead letter of a fresh reader.
FIRST_FETCH_S = 5.0
#: How long a repeated librdkafka message (same facility) stays silent.
KAFKA_LOG_REPEAT_S = 60.0
#: How long ``revisit dead-letters journal --replay`` waits for the journal topic.
REPLAY_TIMEOUT_S = 30.0


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
    session = SESSION_TIMEOUT_MS
    return {
        "bootstrap.servers": settings.kafka_brokers,
        "group.id": settings.journal_group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": session,
        "heartbeat.interval.ms": max(100, session // 10),
        # A topic re-created after a broker restart is seen within seconds.
        "topic.metadata.refresh.interval.ms": 5000,
        "log_level": 3,
        "logger": kafka_logger(settings),
    }


def admin_client(settings: Settings) -> AdminClient:
    """An admin client of the brokers, logging as the other clients do."""
    config: dict[str, Any] = {"bootstrap.servers": settings.kafka_brokers, "log_level": 3}
    return AdminClient({**config, "logger": kafka_logger(settings)})  # type: ignore[dict-item]


#: Partitions of the topics that ``ensure_topics`` creates.
TOPIC_PARTITIONS = 4


def ensure_topics(
    settings: Settings, partitions: int = TOPIC_PARTITIONS, timeout_s: float = 30.0
) -> None:
    """Create the journal and dead-letter topics if the broker lacks them.

    Called at start and whenever a topic is found missing (a memory-only
    broker that restarted has none), so no process waits for a person to
    create them.
    """
    admin = admin_client(settings)
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


def topic_partitions(settings: Settings, topic: str, timeout_s: float = 10.0) -> int | None:
    """How many partitions ``topic`` has: 0 if the brokers do not have it, None if
    they do not answer within ``timeout_s``. Asks for every topic's metadata:
    asking for one by name may create it on a broker that creates topics on
    demand."""
    try:
        described = admin_client(settings).list_topics(timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        log.warning("could not read the partitions of %s: %s", topic, exc)
        return None
    if described is None or described.error is not None:
        return 0
    return len(described.partitions)


def idle_members(processes: int, partitions: int | None, topic: str) -> str | None:
    """What to tell an operator who runs more journal processes than ``topic``
    has partitions (the extra ones hold none and sit idle); None otherwise."""
    if partitions is None or processes <= partitions:
        return None
    idle = processes - partitions
    return (
        f"{processes} journal processes for the {partitions} partition"
        f"{'s' if partitions != 1 else ''} of {topic}: {idle} will hold no partition and "
        "apply nothing (run at most as many processes as partitions, or add partitions)"
    )


class PublishError(RuntimeError):
    """The broker did not acknowledge records within ``PUBLISH_TIMEOUT_S``."""


class PublishRefused(PublishError):
    """The broker answered and refused the records for a reason a retry meets again
    (the topic's name or rights, a record's size): ``error`` names it."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(f"refused: {error.str()}")
        self.error = error


#: Refusals a fresh producer would meet again. librdkafka's own flags do not tell
#: them: a delivery report's error is never marked retriable, and a fatal error is
#: what a restarted broker gives an idempotent producer, which a replacement fixes.
REFUSALS = frozenset(
    {
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.UNSUPPORTED_VERSION,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError._INVALID_ARG,
        KafkaError._UNSUPPORTED_FEATURE,
    }
)


def is_refusal(error: KafkaError) -> bool:
    """True if ``error`` refuses records for good (retrying cannot help)."""
    return bool(error.code() in REFUSALS)


def refusal_of(exc: BaseException) -> KafkaError | None:
    """The broker's refusal ``exc`` reports (``is_refusal``), None if it reports
    anything else (the broker away, a timeout)."""
    if isinstance(exc, PublishRefused):
        return exc.error
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return error if isinstance(error, KafkaError) and is_refusal(error) else None


#: What the Kafka client raises when the broker is away or refuses.
ERRORS: tuple[type[Exception], ...] = (KafkaException, PublishError)


def is_kafka_error(exc: BaseException) -> bool:
    """True if the Kafka client failed (the broker away, or refusing)."""
    return isinstance(exc, ERRORS)


def is_missing_topic(error: KafkaError) -> bool:
    """True if a message's error says its topic or partition does not exist."""
    return bool(error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)


def is_partition_end(error: KafkaError) -> bool:
    """True if a message's error only says the end of a partition was reached."""
    return bool(error.code() == KafkaError._PARTITION_EOF)


def next_offsets(messages: list[Message]) -> list[TopicPartition]:
    """The offsets to commit after ``messages``: one past the last of each partition.

    A consumer returns each partition's messages in offset order, so the last
    message of a partition is its highest offset."""
    last: dict[tuple[Any, Any], Message] = {(m.topic(), m.partition()): m for m in messages}
    return [
        TopicPartition(str(t), int(p), int(m.offset() or 0) + 1)
        for (t, p), m in sorted(last.items(), key=lambda item: item[0])
    ]


@dataclass(frozen=True)
class Record:
    """One record to produce."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, str | bytes | None]] | None = None


class ResilientProducer:
    """A producer that waits for acknowledgements and replaces itself when stuck.

    librdkafka's idempotent producer turns fatal, or retries forever, once a
    restarted broker no longer knows its producer id (UNKNOWN_PRODUCER_ID);
    it never recovers by itself. A fresh producer gets a new id. Records are
    re-sent after a replacement: the journal's consumers absorb duplicates.
    """

    def __init__(self, settings: Settings, stop: threading.Event | None = None) -> None:
        self._config = producer_config(settings)
        #: Set when the process is told to stop: every wait below watches it.
        self.stop = stop or threading.Event()
        self._fatal: KafkaError | None = None
        #: Producers replaced so far, because they turned fatal or stalled.
        self.replaced = 0
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        self._fatal = None
        return Producer({**self._config, "error_cb": self._on_error})

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = error

    def send(self, records: list[Record], timeout_s: float | None = None) -> None:
        """Produce ``records`` and wait until the broker has them all.

        Raises PublishError after ``timeout_s`` (by default ``PUBLISH_TIMEOUT_S``)
        without success, or within about ``STOP_CHECK_S`` of ``stop`` being set
        (the records may then be lost: a caller that needs them retries after
        its restart). Raises PublishRefused at once when the broker refuses them
        for good (``is_refusal``): waiting out the deadline would change nothing.
        """
        timeout_s = PUBLISH_TIMEOUT_S if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            failure = self._attempt(records, deadline)
            if failure is None:
                return
            if isinstance(failure, KafkaError):
                raise PublishRefused(failure)
            if self.stop.is_set():
                raise PublishError(f"stopped before acknowledgement: {failure}")
            if time.monotonic() >= deadline:
                raise PublishError(f"not acknowledged in {timeout_s:g}s: {failure}")
            self._replace(failure)

    def _attempt(self, records: list[Record], deadline: float) -> str | KafkaError | None:
        """Produce and flush once; None if it succeeded, the refusal if the broker
        refused for good, else why it failed."""
        errors: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                errors.append(error)

        started = time.monotonic()
        try:
            for r in records:
                self.producer.produce(
                    r.topic, value=r.value, key=r.key, headers=r.headers, on_delivery=delivered
                )
            remaining = self._flush(min(started + PUBLISH_ATTEMPT_S, deadline))
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and is_refusal(error):
                return error
            failure: str | None = f"produce failed: {exc}"
        except BufferError as exc:
            failure = f"produce failed: {exc}"
        else:
            refusal = next((e for e in errors if is_refusal(e)), None)
            if refusal is None and self._fatal is not None and is_refusal(self._fatal):
                refusal = self._fatal
            if refusal is not None:
                return refusal
            failure = None
            if self._fatal is not None:
                failure = f"fatal: {self._fatal.str()}"
            elif remaining:
                failure = f"{remaining} record(s) unacknowledged after {PUBLISH_ATTEMPT_S:g}s"
            elif errors:
                failure = f"delivery failed: {errors[0].str()}"
        if failure is not None and time.monotonic() - started < RETRY_PAUSE_S:
            self.stop.wait(max(0.0, min(RETRY_PAUSE_S, deadline - time.monotonic())))
        return failure

    def _flush(self, deadline: float) -> int:
        """Wait for acknowledgements until ``deadline`` or ``stop``, in short slices
        (flush itself cannot be interrupted); how many records remain."""
        while True:
            left = deadline - time.monotonic()
            remaining = int(self.producer.flush(max(0.0, min(STOP_CHECK_S, left))))
            if not remaining or left <= STOP_CHECK_S or self.stop.is_set():
                return remaining

    def _replace(self, reason: str) -> None:
        log.warning("Kafka producer replaced (%s)", reason)
        old, self.producer = self.producer, self._new_producer()
        old.purge()
        old.flush(0)
        self.replaced += 1

    def discard(self) -> None:
        """Drop what was never acknowledged (at close, when no one waits for it)."""
        self.producer.purge()
        self.producer.flush(0)


class StatusPublisher:
    """Publishes origin_visit_status records as the archive's loaders do."""

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.journal_topic
        self.producer = ResilientProducer(settings)

    def publish(
        self,
        origin: str,
        visit_type: str,
        visit: int,
        status: str,
        snapshot: bytes | None,
        metadata: dict[str, Any] | None = None,
        date: datetime | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Publish one status and wait until the broker has it (PublishError if it
        does not within ``timeout_s``, by default ``PUBLISH_TIMEOUT_S``)."""
        date = date or datetime.now(tz=UTC)
        value = visit_status_value(origin, visit, date, status, snapshot, visit_type, metadata)
        key = visit_status_key(origin, visit, date)
        self.producer.send([Record(self.topic, encode(value), key)], timeout_s)


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
            # A fresh consumer's first fetch takes a moment (connections,
            # metadata): only a silence after that counts as the end.
            message = consumer.poll(idle_s if found else max(idle_s, FIRST_FETCH_S))
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
    is idempotent, so a message replayed twice counts once); PublishError if the
    broker does not take them all within ``REPLAY_TIMEOUT_S``, PublishRefused at
    once if it refuses them."""
    records = [Record(settings.journal_topic, letter.value, letter.key) for letter in letters]
    ResilientProducer(settings).send(records, timeout_s=REPLAY_TIMEOUT_S)
