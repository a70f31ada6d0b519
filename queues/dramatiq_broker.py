"""Dramatiq's Redis broker as revisit uses it: the one module that reaches into
Dramatiq's private API (``tests/integration/test_broker.py`` is its contract
test against the pinned version).

- ``redis_broker``: a broker configured from the settings, without middleware
  (``actors.broker.make_broker`` adds revisit's);
- ``enqueue_many``: a pipelined batch enqueue (Dramatiq has none), which calls
  the broker's dispatch script and its maintenance chance directly;
- ``encode``: a message's bytes, as ``Message.encode`` gives them;
- ``visit_message``: the message of one visit, as the scheduler and
  ``revisit schedule`` send it and ``actors.worker.visit`` receives it;
- ``enqueue_first``: a message at the head of its queue
  (``queues/lua/enqueue_first.lua``);
- ``return_dead_workers_messages``: Dramatiq's queue maintenance, run now;
- ``served_queues`` and ``worker_threads``: what a worker process consumes.

Private names used: ``RedisBroker._should_do_maintenance``,
``RedisBroker._max_unpack_size``, ``RedisBroker.scripts["dispatch"]`` and
its arguments, ``Worker.consumer_whitelist`` and ``Worker.worker_threads``.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from typing import Any, Protocol
from uuid import uuid4

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis
from redis.client import Pipeline

from app.settings import Settings
from queues import keys


class Tuning(Protocol):
    """How a visit runs (``app.scheduler_step.Tuning``)."""

    @property
    def visit_time_limit_s(self) -> float: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def retry_delay_s(self) -> float: ...


class VisitOrder(Protocol):
    """What a visit message carries (``app.scheduling.VisitOrder``): the actor's kwargs."""

    def as_kwargs(self) -> dict[str, Any]: ...


def redis_broker(settings: Settings) -> RedisBroker:
    """A Redis broker configured from ``settings``, with Dramatiq's default middleware."""
    return RedisBroker(  # type: ignore[no-untyped-call]
        url=settings.broker_redis_dsn(),
        namespace=settings.dramatiq_namespace,
        heartbeat_timeout=settings.dramatiq_heartbeat_timeout_ms,
        maintenance_chance=settings.dramatiq_maintenance_chance,
    )


def visit_message(
    queue: str, order: VisitOrder, lane: str, time_limit_s: float, tuning: Tuning | None = None
) -> dramatiq.Message[Any]:
    """The Dramatiq message of one visit (actor ``visit``) in a lane, with its time
    limit and, when given, its visit type's tuning (else the worker's settings)."""
    options: dict[str, Any] = {"time_limit": int(time_limit_s * 1000)}
    if tuning is not None:
        options.update(tuning_options(tuning))
    return dramatiq.Message(
        queue_name=queue,
        actor_name="visit",
        args=(),
        kwargs={**order.as_kwargs(), "lane": lane},
        options=options,
    )


#: The message options that carry a visit type's tuning: Dramatiq's Retries
#: reads min_backoff and max_backoff (ms); the visit actor reads max_retries,
#: and the express escalation visit_time_limit (ms).
TUNING_OPTIONS = ("visit_time_limit", "max_retries", "min_backoff", "max_backoff")


def tuning_options(tuning: Tuning) -> dict[str, int]:
    """The message options of ``tuning`` (``TUNING_OPTIONS``)."""
    delay_ms = int(tuning.retry_delay_s * 1000)
    return {
        "visit_time_limit": int(tuning.visit_time_limit_s * 1000),
        "max_retries": tuning.max_retries,
        "min_backoff": delay_ms,
        "max_backoff": delay_ms * 2**tuning.max_retries,
    }


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
        message = _with_redis_id(message)
        broker.emit_before("enqueue", message, None)
        by_queue.setdefault(message.queue_name, []).append(message)
    pipe = broker.client.pipeline(transaction=False)
    for queued in by_queue.values():
        _dispatch_enqueue(broker, pipe, queued)
    pipe.execute()
    for queued in by_queue.values():
        for message in queued:
            broker.emit_after("enqueue", message, None)


def _with_redis_id(message: dramatiq.Message[Any]) -> dramatiq.Message[Any]:
    """``message.copy(options={"redis_message_id": ...})``, as ``RedisBroker.enqueue``
    does, built directly: ``dataclasses.replace`` took twice as long."""
    return dramatiq.Message(
        queue_name=message.queue_name,
        actor_name=message.actor_name,
        args=message.args,
        kwargs=message.kwargs,
        options={**message.options, "redis_message_id": str(uuid4())},
        message_id=message.message_id,
        message_timestamp=message.message_timestamp,
    )


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
        encode(first),
    ]
    broker.scripts["dispatch"](keys=[broker.namespace], args=args, client=pipe)
    if rest:
        ns = broker.namespace
        ids = [m.options["redis_message_id"] for m in rest]
        # The hash first: a worker fetching an id from the list must find its message.
        pipe.hset(
            keys.dramatiq_messages(ns, first.queue_name),
            mapping={i: encode(m) for i, m in zip(ids, rest, strict=True)},
        )
        pipe.rpush(keys.dramatiq_queue(ns, first.queue_name), *ids)


def encode(message: dramatiq.Message[Any]) -> bytes:
    """``message.encode()``, byte for byte (the contract test checks it), without
    its walk over the dataclass fields, which cost as much as the encoding."""
    return dramatiq.get_encoder().encode(
        {
            "queue_name": message.queue_name,
            "actor_name": message.actor_name,
            "args": message.args,
            "kwargs": message.kwargs,
            "options": message.options,
            "message_id": message.message_id,
            "message_timestamp": message.message_timestamp,
        }
    )


def enqueue_first(broker: RedisBroker, message: dramatiq.Message[Any]) -> None:
    """Enqueue ``message`` at the head of its queue (served before the others)."""
    message = message.copy(options={"redis_message_id": str(uuid4())})
    broker.declare_queue(message.queue_name)
    broker.emit_before("enqueue", message, None)
    ns = broker.namespace
    script = (resources.files("queues") / "lua" / "enqueue_first.lua").read_text()
    broker.client.eval(
        script,
        2,
        keys.dramatiq_messages(ns, message.queue_name),
        keys.dramatiq_queue(ns, message.queue_name),
        message.options["redis_message_id"],
        message.encode(),
    )
    broker.emit_after("enqueue", message, None)


def return_dead_workers_messages(broker: RedisBroker, queue_name: str) -> None:
    """Run Dramatiq's queue maintenance now: the unacknowledged messages of
    workers silent for longer than the heartbeat timeout go back to their
    queues. Dramatiq itself runs it on a random share of commands, which can
    take minutes when workers are few; the scheduler calls this every step, so
    a killed worker's visits return within heartbeat timeout + one step."""
    args = [
        "qsize",
        current_millis(),
        queue_name,
        broker.broker_id,
        broker.heartbeat_timeout,
        broker.dead_message_ttl,
        1,
        broker._max_unpack_size(),  # type: ignore[no-untyped-call]
    ]
    broker.scripts["dispatch"](args=args, keys=[broker.namespace])


def served_queues(broker: RedisBroker, worker: Any) -> list[str]:
    """The queues a worker process consumes (its --queues, else every declared one)."""
    return sorted(worker.consumer_whitelist or broker.get_declared_queues())


def worker_threads(worker: Any) -> int:
    """How many worker threads a worker process runs."""
    return int(worker.worker_threads)
