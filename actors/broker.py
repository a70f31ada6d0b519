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
from redis.client import Pipeline

from actors.dead_letter_reasons import DeadLetterReasons
from actors.undecodable import SweepUndecodable
from app.context import redis_client
from app.settings import Settings
from monitoring.dramatiq_metrics import WorkerMetrics
from queues import keys


def make_broker(settings: Settings) -> RedisBroker:
    """A Redis broker configured from ``settings``, set as Dramatiq's global broker.

    Its Prometheus middleware exports only in processes started with a
    multiprocess directory (``revisit worker`` and ``revisit api``).
    """
    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=settings.broker_redis_dsn(),
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
    pipe.hlen(keys.dramatiq_messages(ns, queue_name))
    pipe.hlen(keys.dramatiq_messages(ns, f"{queue_name}.DQ"))
    return int(sum(pipe.execute()))


def enqueue_many(broker: RedisBroker, messages: Sequence[dramatiq.Message[Any]]) -> None:
    """Enqueue ``messages`` in one Redis round trip (Dramatiq has no batch enqueue).

    Does what ``RedisBroker.enqueue`` does for each message, middleware hooks
    included. Per queue, the first message goes through Dramatiq's dispatch
    script (worker heartbeat, and queue maintenance, which returns a dead
    worker's messages, with the chance every message would have given it);
    the others are stored with one HSET and one RPUSH, which is all that
    script's ``enqueue`` does for them (one Lua call per message was most of
    Redis's time). The contract test runs these messages on a real worker.
    """
    if not messages:
        return
    by_queue: dict[str, list[dramatiq.Message[Any]]] = {}
    for message in messages:
        message = message.copy(options={"redis_message_id": str(uuid4())})
        broker.emit_before("enqueue", message, None)
        by_queue.setdefault(message.queue_name, []).append(message)
    pipe = broker.client.pipeline(transaction=False)
    for queued in by_queue.values():
        _dispatch_enqueue(broker, pipe, queued)
    pipe.execute()
    for queued in by_queue.values():
        for message in queued:
            broker.emit_after("enqueue", message, None)


def _dispatch_enqueue(
    broker: RedisBroker, pipe: Pipeline, queued: list[dramatiq.Message[Any]]
) -> None:
    """Queue the commands storing ``queued`` (messages of one queue, in order) on ``pipe``."""
    first, rest = queued[0], queued[1:]
    maintenance = max(broker._should_do_maintenance("enqueue") for _ in queued)
    args = [
        "enqueue",
        current_millis(),
        first.queue_name,
        broker.broker_id,
        broker.heartbeat_timeout,
        broker.dead_message_ttl,
        maintenance,
        broker._max_unpack_size(),  # type: ignore[no-untyped-call]
        first.options["redis_message_id"],
        first.encode(),
    ]
    broker.scripts["dispatch"](keys=[broker.namespace], args=args, client=pipe)
    if rest:
        ns = broker.namespace
        ids = [m.options["redis_message_id"] for m in rest]
        # The hash first: a worker fetching an id from the list must find its message.
        pipe.hset(
            keys.dramatiq_messages(ns, first.queue_name),
            mapping={i: m.encode() for i, m in zip(ids, rest, strict=True)},
        )
        pipe.rpush(keys.dramatiq_queue(ns, first.queue_name), *ids)
