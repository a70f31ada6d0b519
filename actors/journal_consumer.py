"""The journal client's Kafka consumer: its group, missing topics, offsets, and
a watchdog that replaces a consumer its group no longer serves.

librdkafka reconnects by itself, but after a broker restart a consumer can stay
unserved for good while a new one of the same group is served at once: with no
assignment (stuck "rebalancing"), or with an empty one (it rejoined before the
topic existed again, and the topic's return did not make it rejoin; likewise on
Apache Kafka for a topic deleted and created again). So a consumer with no
assignment for ``REJOIN_AFTER_S``, or an empty one while no member of the group
owns some partition, is replaced. The new consumer reads the uncommitted
messages again: the journal's processing is idempotent.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from app.kafka.client import ERRORS as KAFKA_ERRORS
from app.kafka.client import (
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
    admin_client,
    consumer_config,
    ensure_topics,
    is_missing_topic,
    is_partition_end,
    kafka_logger,
    next_offsets,
)
from app.settings import Settings
from monitoring.metrics import (
    JOURNAL_ASSIGNED_PARTITIONS,
    JOURNAL_CONSUMER_LAG,
    JOURNAL_CONSUMERS_REPLACED,
    JOURNAL_KAFKA_ERRORS,
)
from monitoring.multiprocess import forget

#: Messages per batch (the figures of benchmarks/README.md).
BATCH_SIZE = 10000
#: Longest wait for a batch to fill.
BATCH_TIMEOUT_S = 0.5
#: Replace the consumer after this long without a (useful) assignment.
REJOIN_AFTER_S = 60.0

log = logging.getLogger("revisit.journal")
#: Least time between two attempts to re-create a missing topic.
ENSURE_TOPICS_EVERY_S = 10.0
#: How long creating the topics, or asking who owns them, may take (the stop
#: signal waits that long at most).
ADMIN_TIMEOUT_S = 5.0


class JournalConsumer:
    """The group consumer of the journal topic, replaced when its group is lost."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._topics_ensured_at = -ENSURE_TOPICS_EVERY_S
        self.ensure_topics()
        #: Since when no assignment was made (None: one was).
        self.unassigned_since: float | None = clock()
        #: Since when the assignment made is empty (None: not empty, or none made).
        self.empty_since: float | None = None
        #: Consumers replaced so far by the watchdog.
        self.replaced = 0
        self.consumer: Consumer = self._subscribe()

    def _subscribe(self) -> Consumer:
        consumer = Consumer({**consumer_config(self.settings), "error_cb": self._on_error})
        consumer.subscribe(
            [self.settings.journal_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        return consumer

    def _on_error(self, error: KafkaError) -> None:
        """A client-wide error (every broker down, a name that does not resolve):
        counted, and one line per kind a minute (``kafka_logger``)."""
        JOURNAL_KAFKA_ERRORS.labels(error.name()).inc()
        kafka_logger(self.settings).warning(
            "%s: %s; the journal client waits for the broker", error.name(), error.str()
        )

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.unassigned_since = None
        self.empty_since = None if partitions else self._clock()
        JOURNAL_ASSIGNED_PARTITIONS.set(len(partitions))
        log.info("assigned partitions %s", sorted(tp.partition for tp in partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.unassigned_since = self._clock()
        self.empty_since = None
        JOURNAL_ASSIGNED_PARTITIONS.set(0)
        for tp in partitions:
            # Its new owner, maybe another client process, reports it from now on.
            forget(JOURNAL_CONSUMER_LAG, str(tp.partition))

    def ensure_topics(self) -> None:
        """Create missing topics, at most every ENSURE_TOPICS_EVERY_S; a broker that
        is away is only logged (the next missing-topic error tries again)."""
        if self._clock() - self._topics_ensured_at < ENSURE_TOPICS_EVERY_S:
            return
        self._topics_ensured_at = self._clock()
        try:
            ensure_topics(self.settings, timeout_s=ADMIN_TIMEOUT_S)
        except Exception as exc:
            log.warning("could not ensure the Kafka topics (%s); will try again", exc)

    def poll(self, timeout_s: float | None = None) -> list[Message]:
        """The next batch of messages (possibly empty), waiting at most ``timeout_s``
        (by default ``BATCH_TIMEOUT_S``) for a full one."""
        self.replace_if_unassigned()
        wait_s = BATCH_TIMEOUT_S if timeout_s is None else timeout_s
        messages = self.consumer.consume(BATCH_SIZE, timeout=wait_s)
        good = [m for m in messages if m.error() is None]
        if len(good) == len(messages):
            return good
        for message in messages:
            error = message.error()
            if error is None:
                continue
            if is_missing_topic(error):
                log.warning("kafka: %s; creating the missing topics", error)
                self.ensure_topics()
            elif not is_partition_end(error):
                log.warning("kafka: %s", error)
        return good

    def replace_if_unassigned(self) -> bool:
        """Replace the consumer if its group has not served it for
        ``REJOIN_AFTER_S`` (see the module's docstring); whether it did."""
        now = self._clock()
        bound_s = REJOIN_AFTER_S
        if self.unassigned_since is not None and now - self.unassigned_since >= bound_s:
            reason = f"no assignment for {now - self.unassigned_since:.0f}s"
        elif self.empty_since is not None and now - self.empty_since >= bound_s:
            unowned = self.unowned_partitions()
            if not unowned:
                self.empty_since = now  # an extra member: look again later
                return False
            reason = (
                f"nothing assigned for {now - self.empty_since:.0f}s while no member "
                f"owns {unowned} partition(s)"
            )
        else:
            return False
        log.warning(
            "%s (REJOIN_AFTER_S): replacing the Kafka consumer, to join its group afresh",
            reason,
        )
        self.close()
        self._topics_ensured_at = -ENSURE_TOPICS_EVERY_S
        self.ensure_topics()
        self.unassigned_since, self.empty_since = self._clock(), None
        self.consumer = self._subscribe()
        self.replaced += 1
        JOURNAL_CONSUMERS_REPLACED.inc()
        return True

    def unowned_partitions(self) -> int:
        """Partitions of the journal topic that no member of the group owns, as the
        broker describes the group (0 when it cannot say)."""
        topic, group = self.settings.journal_topic, self.settings.journal_group_id
        try:
            admin = admin_client(self.settings)
            described = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
            futures = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)
            members = futures[group].result(ADMIN_TIMEOUT_S).members
        except Exception as exc:
            log.info("could not describe the consumer group (%r)", exc)
            return 0
        if described is None or described.error is not None:
            return 0
        owned = {
            tp.partition
            for member in members
            if member.assignment is not None
            for tp in member.assignment.topic_partitions
            if tp.topic == topic
        }
        return len(set(described.partitions) - owned)

    def commit(self, messages: list[Message]) -> None:
        """Commit the offsets after ``messages`` (only once they are applied), and
        update the lag per partition."""
        offsets = next_offsets(messages)
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KAFKA_ERRORS as exc:
            # Typically a rebalance took the partitions away: their new owner
            # replays from the last committed offsets, which changes nothing.
            log.warning("offset commit failed (%s); the batch will be replayed", exc)
            return
        for tp in offsets:
            _low, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and high >= 0:
                JOURNAL_CONSUMER_LAG.labels(str(tp.partition)).set(max(0, high - tp.offset))

    def close(self) -> None:
        """Leave the group (a broker that is away does not hold this up)."""
        with contextlib.suppress(*KAFKA_ERRORS, RuntimeError):
            self.consumer.close()
        JOURNAL_ASSIGNED_PARTITIONS.set(0)
