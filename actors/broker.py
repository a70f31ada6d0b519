"""The Dramatiq broker every revisit process shares, and a pipelined batch enqueue.

Settings are chosen so a SIGKILLed worker's messages come back quickly:
Dramatiq requeues them only when another process runs queue maintenance after
``heartbeat_timeout``; with the default maintenance chance (0.1% of commands)
that can take many minutes, so revisit raises it (see the README).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import dramatiq
from dramatiq.brokers.redis import DEFAULT_DEAD_MESSAGE_TTL, RedisBroker
from dramatiq.common import current_millis
from dramatiq.middleware import Retries

from actors.dead_letter_reasons import DeadLetterReasons
from actors.undecodable import SweepUndecodable
from app.context import redis_client
from app.settings import Settings
from monitoring.dramatiq_metrics import WorkerMetrics


def make_broker(settings: Settings) -> RedisBroker:
    """A Redis broker configured from ``settings``, set as Dramatiq's global broker.

    Its Prometheus middleware exports only in processes started with a
    multiprocess directory (``revisit worker`` and ``revisit api``).
    """
    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=settings.redis_dsn(),
        namespace=settings.dramatiq_namespace,
        heartbeat_timeout=settings.dramatiq_heartbeat_timeout_ms,
        maintenance_chance=settings.dramatiq_maintenance_chance,
    )
    broker.add_middleware(WorkerMetrics())
    dead_ttl_s = DEFAULT_DEAD_MESSAGE_TTL / 1000
    # "after" hooks run in reverse order: placed before Retries, it sees the
    # message Retries has just given up on.
    broker.add_middleware(
        DeadLetterReasons(redis_client(settings), settings.redis_namespace, dead_ttl_s),
        before=Retries,
    )
    broker.add_middleware(
        SweepUndecodable(
            redis_client(settings),
            settings.dramatiq_namespace,
            settings.redis_namespace,
            settings.undecodable_sweep_interval_s,
        )
    )
    dramatiq.set_broker(broker)
    return broker


def queue_depth(broker: RedisBroker, queue_name: str) -> int:
    """Messages held for a queue: waiting, running (not yet acked) and delayed."""
    ns = broker.namespace
    pipe = broker.client.pipeline(transaction=False)
    pipe.hlen(f"{ns}:{queue_name}.msgs")
    pipe.hlen(f"{ns}:{queue_name}.DQ.msgs")
    return int(sum(pipe.execute()))


def enqueue_many(broker: RedisBroker, messages: Sequence[dramatiq.Message[Any]]) -> None:
    """Enqueue ``messages`` in one Redis round trip (Dramatiq has no batch enqueue).

    Does what ``RedisBroker.enqueue`` does for each message, middleware hooks
    included, but sends the dispatch script calls through one pipeline.
    """
    if not messages:
        return
    dispatch = broker.scripts["dispatch"]
    pipe = broker.client.pipeline(transaction=False)
    prepared = []
    for message in messages:
        message = message.copy(options={"redis_message_id": str(uuid4())})
        broker.emit_before("enqueue", message, None)
        args = [
            "enqueue",
            current_millis(),
            message.queue_name,
            broker.broker_id,
            broker.heartbeat_timeout,
            broker.dead_message_ttl,
            # Enqueues count as commands that may run queue maintenance, which
            # is what returns a dead worker's messages.
            broker._should_do_maintenance("enqueue"),
            broker._max_unpack_size(),  # type: ignore[no-untyped-call]
            message.options["redis_message_id"],
            message.encode(),
        ]
        dispatch(keys=[broker.namespace], args=args, client=pipe)
        prepared.append(message)
    pipe.execute()
    for message in prepared:
        broker.emit_after("enqueue", message, None)
