"""Several journal client processes in one consumer group (one per core).

The journal client is one Python interpreter; the topic's partitions let
several clients share the work, as production runs them. This starts
``clients`` processes (spawned: no Kafka client crosses a fork), each a
JournalClient configured from the REVISIT_* environment, and times from the
first message any of them applies until the group's committed offsets cover
every message (a rebalance that replays a batch costs its time here).
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition

from actors.journal import JournalClient, tune_gc
from app.settings import Settings

POLL_S = 0.05


def _client(stop: Any, first: Any) -> None:
    client = JournalClient(Settings())
    tune_gc()
    poll = client.poll_batch

    def first_poll(timeout_s: float | None = None) -> list[Message]:
        batch = poll(timeout_s)
        if batch:
            with first.get_lock():
                if first.value == 0.0:
                    first.value = time.time()
        return batch

    client.poll_batch = first_poll  # type: ignore[method-assign]
    client.run(stop)  # as ``revisit journal`` runs it; closes the client when stopped


def committed(settings: Settings, partitions: int) -> int:
    """Messages the group has committed over the topic's partitions."""
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka_brokers, "group.id": settings.journal_group_id}
    )
    try:
        tps = [TopicPartition(settings.journal_topic, p) for p in range(partitions)]
        return sum(max(0, tp.offset) for tp in consumer.committed(tps, timeout=10))
    finally:
        consumer.close()


def consume_with_processes(
    settings: Settings, messages: int, clients: int, partitions: int
) -> float:
    """Seconds for ``clients`` processes to apply and commit ``messages``."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    first = context.Value("d", 0.0)
    procs = [context.Process(target=_client, args=(stop, first)) for _ in range(clients)]
    for proc in procs:
        proc.start()
    try:
        while committed(settings, partitions) < messages:
            time.sleep(POLL_S)
        finished = time.time()
    finally:
        stop.set()
        for proc in procs:
            proc.join(60)
    return finished - float(first.value)
