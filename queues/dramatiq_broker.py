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

``enqueue_many`` also stands in for ``Broker.emit_before`` / ``emit_after``
of "enqueue" (the same calls and error handling, minus the hooks that
Dramatiq's ``Middleware`` leaves empty) and for ``JSONEncoder.encode`` (the
same bytes from one reused ``json.JSONEncoder``).

Private names used: ``RedisBroker._should_do_maintenance``,
``RedisBroker._max_unpack_size``, ``RedisBroker.scripts["dispatch"]`` and
its arguments, ``Worker.consumer_whitelist`` and ``Worker.worker_threads``;
and ``Message`` being a dataclass without slots (``_with_redis_id`` copies
its ``__dict__``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, Protocol
from uuid import uuid4

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis
from dramatiq.middleware import Middleware, MiddlewareError
from redis.client import Pipeline

from app.settings import Settings
from queues import keys
from queues.keys import DRAMATIQ_NAMESPACE

#: A worker silent this long is dead: its unacknowledged messages go back to their queue.
HEARTBEAT_TIMEOUT_MS = 15000
#: Chance, per million fetches, that a fetch also runs Dramatiq's maintenance
#: (requeueing dead workers' messages, trimming dead letters).
MAINTENANCE_CHANCE = 50000


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
        namespace=DRAMATIQ_NAMESPACE,
        heartbeat_timeout=HEARTBEAT_TIMEOUT_MS,
        maintenance_chance=MAINTENANCE_CHANCE,
    )


def visit_message(
    queue: str, order: VisitOrder, lane: str, time_limit_s: float, tuning: Tuning | None = None
) -> dramatiq.Message[Any]:
    """The Dramatiq message of one visit (actor ``visit``) in a lane, with its time
    limit and, when given, its visit type's tuning (else the worker's settings)."""
    options: dict[str, Any] = {"time_limit": int(time_limit_s * 1000)}
    if tuning is not None:
        options.update(tuning_options(tuning))
    kwargs = order.as_kwargs()
    kwargs["lane"] = lane
    return dramatiq.Message(
        queue_name=queue,
        actor_name="visit",
        args=(),
        kwargs=kwargs,
        options=options,
        message_id=message_id(),
    )


#: Message ids drawn from the system's random source at a time (``message_id``).
MESSAGE_IDS_PER_DRAW = 1024
_message_ids: list[str] = []


def message_id() -> str:
    """A message id as Dramatiq's ``generate_unique_id`` gives it (``str(uuid4())``),
    from a buffer filled ``MESSAGE_IDS_PER_DRAW`` at a time (``unique_ids``): one
    ``uuid4()`` per visit message was 40 % of building it. Each id is handed out
    once (``list.pop`` is atomic between threads); a forked child empties the
    buffer it inherited, so it never hands out its parent's ids."""
    try:
        return _message_ids.pop()
    except IndexError:
        _message_ids.extend(unique_ids(MESSAGE_IDS_PER_DRAW))
        return _message_ids.pop()


os.register_at_fork(after_in_child=_message_ids.clear)


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
    before = _hooks(broker, "before_enqueue", broker.middleware)
    after = _hooks(broker, "after_enqueue", reversed(broker.middleware))
    by_queue: dict[str, list[dramatiq.Message[Any]]] = {}
    for message, redis_id in zip(messages, unique_ids(len(messages)), strict=True):
        message = _with_redis_id(message, redis_id)
        _emit(broker, before, "before_enqueue", message, reraise=True)
        by_queue.setdefault(message.queue_name, []).append(message)
    pipe = broker.client.pipeline(transaction=False)
    for queued in by_queue.values():
        _dispatch_enqueue(broker, pipe, queued)
    pipe.execute()
    for queued in by_queue.values():
        for message in queued:
            _emit(broker, after, "after_enqueue", message, reraise=False)


Hook = tuple[Middleware, Callable[..., None]]


def _hooks(broker: RedisBroker, signal: str, middleware: Any) -> list[Hook]:
    """The ``signal`` hooks of ``middleware`` (in that order) that do something:
    ``Broker.emit_*`` also calls the empty ones Dramatiq's ``Middleware``
    defines, nine calls per message for one that counts (WorkerMetrics)."""
    empty = getattr(Middleware, signal)
    hooks = [(m, getattr(m, signal)) for m in middleware]
    return [(m, hook) for m, hook in hooks if getattr(hook, "__func__", None) is not empty]


def _emit(
    broker: RedisBroker,
    hooks: list[Hook],
    signal: str,
    message: dramatiq.Message[Any],
    *,
    reraise: bool,
) -> None:
    """``broker.emit_before`` (``reraise``: a MiddlewareError stops the enqueue)
    or ``emit_after`` of ``signal`` for one message, over ``hooks``."""
    for middleware, hook in hooks:
        try:
            hook(broker, message, None)
        except Exception as exc:
            if reraise and isinstance(exc, MiddlewareError):
                raise
            broker.logger.critical(
                "Unexpected failure in %s of %r.", signal, middleware, exc_info=True
            )


def unique_ids(count: int) -> list[str]:
    """``count`` strings as ``str(uuid.uuid4())`` gives them (random, version 4,
    RFC 4122 variant), from one read of the system's random source rather
    than one ``uuid4()`` (one read each) per message."""
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = bytes((b & 0x0F) | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes((b & 0x3F) | 0x80 for b in raw[8::16])  # variant 10xx
    h = raw.hex()
    return [
        f"{h[k : k + 8]}-{h[k + 8 : k + 12]}-{h[k + 12 : k + 16]}-"
        f"{h[k + 16 : k + 20]}-{h[k + 20 : k + 32]}"
        for k in range(0, 32 * count, 32)
    ]


def _with_redis_id(message: dramatiq.Message[Any], redis_id: str) -> dramatiq.Message[Any]:
    """``message.copy(options={"redis_message_id": ...})``, as ``RedisBroker.enqueue``
    does: a shallow copy of its fields with new options. Built from the
    instance's ``__dict__`` (a frozen dataclass without slots): its
    ``__init__`` sets each field with ``object.__setattr__`` and ran
    ``__post_init__``, four times as long, and ``dataclasses.replace`` eight."""
    copy: dramatiq.Message[Any] = object.__new__(type(message))
    fields = copy.__dict__
    fields.update(message.__dict__)
    fields["options"] = {**message.options, "redis_message_id": redis_id}
    return copy


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


#: What ``dramatiq.JSONEncoder.encode`` builds for every message: built once.
_JSON = json.JSONEncoder(separators=(",", ":"))


def encode(message: dramatiq.Message[Any]) -> bytes:
    """``message.encode()``, byte for byte (the contract test checks it), without
    its walk over the dataclass fields, which cost as much as the encoding, and,
    with Dramatiq's JSON encoder, without a new ``json.JSONEncoder`` per message."""
    data = {
        "queue_name": message.queue_name,
        "actor_name": message.actor_name,
        "args": message.args,
        "kwargs": message.kwargs,
        "options": message.options,
        "message_id": message.message_id,
        "message_timestamp": message.message_timestamp,
    }
    encoder = dramatiq.get_encoder()
    if type(encoder) is dramatiq.JSONEncoder:
        return _JSON.encode(data).encode("utf-8")
    return encoder.encode(data)


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
