"""Dramatiq's Redis broker as revisit uses it: built one way (``redis_broker``;
``actors.broker.make_broker`` adds revisit's middleware), sent to in batches.

Messages are Dramatiq's ``Message``, encoded by Dramatiq's encoder, and the
middleware hooks are emitted by the broker itself. Beyond its documented API,
this module relies on Dramatiq's Redis key layout
(``queues.keys.DramatiqQueueKeys``), on ``RedisBroker.do_enqueue`` and
``do_qsize`` (the dispatch commands behind ``enqueue`` and ``join``) and on the
``Worker`` attributes ``consumer_whitelist`` and ``worker_threads``;
``tests/integration/test_broker.py`` checks each against the installed Dramatiq.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol
from uuid import uuid4

import dramatiq
from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker
from dramatiq.common import q_name

from app.settings import Settings
from queues import lua
from queues.dramatiq_queues import depths
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys, uncounted_messages

#: A worker silent this long is dead: its unacknowledged messages go back to their queue.
HEARTBEAT_TIMEOUT_MS = 15000
#: Chance, per million fetches, that a fetch also runs Dramatiq's maintenance
#: (requeueing dead workers' messages, trimming dead letters).
MAINTENANCE_CHANCE = 50000


class VisitLimits(Protocol):
    """How long and how often a visit runs (``app.services.scheduler_step.VisitLimits``)."""

    @property
    def visit_time_limit_s(self) -> float: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def retry_delay_s(self) -> float: ...


class VisitOrder(Protocol):
    """What a visit message carries (``app.services.scheduling.VisitOrder``): the actor's kwargs."""

    def as_kwargs(self) -> dict[str, Any]: ...


def redis_broker(settings: Settings) -> RedisBroker:
    """A Redis broker configured from ``settings``, with Dramatiq's default middleware.

    Its heartbeat timeout and maintenance chance are revisit's: a SIGKILLed
    worker's messages come back only when some process runs queue maintenance
    after that timeout, which Dramatiq's defaults leave to chance for minutes.
    """
    return RedisBroker(  # type: ignore[no-untyped-call]
        url=settings.broker_redis_dsn(),
        namespace=DRAMATIQ_NAMESPACE,
        heartbeat_timeout=HEARTBEAT_TIMEOUT_MS,
        maintenance_chance=MAINTENANCE_CHANCE,
    )


def visit_message(
    queue: str, order: VisitOrder, lane: str, time_limit_s: float, limits: VisitLimits | None = None
) -> dramatiq.Message[Any]:
    """The Dramatiq message of one visit (actor ``visit``) in a lane, with its time
    limit and, when given, its visit type's limits (else the worker's defaults)."""
    options: dict[str, Any] = {"time_limit": int(time_limit_s * 1000)}
    if limits is not None:
        delay_ms = int(limits.retry_delay_s * 1000)
        options["visit_time_limit"] = int(limits.visit_time_limit_s * 1000)
        options["max_retries"] = limits.max_retries
        options["min_backoff"] = delay_ms
        options["max_backoff"] = delay_ms * 2**limits.max_retries
    kwargs = order.as_kwargs()
    kwargs["lane"] = lane
    return dramatiq.Message(
        queue_name=queue, actor_name="visit", args=(), kwargs=kwargs, options=options
    )


#: The message options that carry a visit type's tuning: Dramatiq's Retries
#: reads min_backoff and max_backoff (ms); the visit actor reads max_retries,
#: and the express escalation visit_time_limit (ms).
TUNING_OPTIONS = ("visit_time_limit", "max_retries", "min_backoff", "max_backoff")


def queue_depth(broker: RedisBroker, queue_name: str) -> int:
    """Visits a queue holds against its max length: waiting, running and delayed,
    less the other messages ``LeaveOutOfDepth`` saw sent to it."""
    return depths(broker.client, [queue_name])[queue_name].visits


class LeaveOutOfDepth(dramatiq.Middleware):
    """Remembers the messages of ``actors``, which are not visits though they are
    sent to a visit's queue, so that ``queue_depth`` does not count them."""

    def __init__(self, actors: frozenset[str]) -> None:
        self.actors = actors

    def after_enqueue(self, broker: Any, message: dramatiq.Message[Any], delay: Any) -> None:
        if message.actor_name in self.actors:
            key = uncounted_messages(broker.namespace, q_name(message.queue_name))
            broker.client.sadd(key, message.options["redis_message_id"])


def enqueue_many(
    broker: RedisBroker, messages: Sequence[dramatiq.Message[Any]]
) -> list[dramatiq.Message[Any]]:
    """Enqueue ``messages`` as ``broker.enqueue`` would one by one, in one Redis
    round trip per queue and one more (Dramatiq has no batch enqueue; a round
    trip per message was most of a scheduling step); returns them as stored.

    Every message first gets its Redis id and passes the broker's
    ``before_enqueue`` hooks (a ``MiddlewareError`` stops the whole batch).
    The first of each queue then goes through Dramatiq's own enqueue command
    (the broker's heartbeat and its chance of queue maintenance); the others
    are stored as that command stores them; then the ``after_enqueue`` hooks run.
    """
    stored = [_before_enqueue(broker, message) for message in messages]
    by_queue: dict[str, list[dramatiq.Message[Any]]] = {}
    for message in stored:
        by_queue.setdefault(message.queue_name, []).append(message)
    pipe = broker.client.pipeline(transaction=False)
    for queue, (first, *rest) in by_queue.items():
        broker.do_enqueue(queue, _redis_id(first), first.encode())
        if rest:
            keys = DramatiqQueueKeys(broker.namespace, queue)
            # The hash first: a worker fetching an id from the list must find its message.
            pipe.hset(keys.messages, mapping={_redis_id(m): m.encode() for m in rest})
            pipe.rpush(keys.waiting, *[_redis_id(m) for m in rest])
    pipe.execute()
    for message in stored:
        broker.emit_after("enqueue", message, None)
    return stored


def _before_enqueue(broker: RedisBroker, message: dramatiq.Message[Any]) -> dramatiq.Message[Any]:
    """``message`` with a Redis id of its own, as ``RedisBroker.enqueue`` gives it (a
    message is enqueued again on each retry), once the ``before_enqueue`` hooks passed."""
    stored = message.copy(options={"redis_message_id": str(uuid4())})
    broker.emit_before("enqueue", stored, None)
    return stored


def _redis_id(message: dramatiq.Message[Any]) -> str:
    return str(message.options["redis_message_id"])


def enqueue_first(broker: RedisBroker, message: dramatiq.Message[Any]) -> None:
    """Enqueue ``message`` at the head of its queue (served before the others)."""
    broker.declare_queue(message.queue_name)
    stored = _before_enqueue(broker, message)
    keys = DramatiqQueueKeys(broker.namespace, stored.queue_name)
    broker.client.eval(
        lua("enqueue_first"), 2, keys.messages, keys.waiting, _redis_id(stored), stored.encode()
    )
    broker.emit_after("enqueue", stored, None)


#: Held while a broker's maintenance chance is raised to certainty.
_maintenance = threading.Lock()


def return_dead_workers_messages(broker: RedisBroker, queue_name: str) -> None:
    """Run Dramatiq's queue maintenance now: the unacknowledged messages of
    workers silent for longer than the heartbeat timeout go back to their
    queues. Dramatiq itself runs it on a random share of commands, which can
    take minutes when workers are few; the scheduler calls this every step, so
    a killed worker's visits return within heartbeat timeout + one step."""
    with _maintenance:
        chance = broker.maintenance_chance
        broker.maintenance_chance = MAINTENANCE_SCALE
        try:
            broker.do_qsize(queue_name)
        finally:
            broker.maintenance_chance = chance


def served_queues(broker: RedisBroker, worker: Any) -> list[str]:
    """The queues a worker process consumes (its --queues, else every declared one)."""
    return sorted(worker.consumer_whitelist or broker.get_declared_queues())


def worker_threads(worker: Any) -> int:
    """How many worker threads a worker process runs."""
    return int(worker.worker_threads)
