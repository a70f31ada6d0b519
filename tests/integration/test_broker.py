"""The contract of queues/dramatiq_broker.py, the one module that uses Dramatiq's private
API, against the installed (pinned) Dramatiq: its consumer, its dispatch script, its worker."""

import inspect
import uuid
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.redis import MAINTENANCE_SCALE
from dramatiq.middleware import Middleware, MiddlewareError

from actors.broker import make_broker
from app.scheduling import VisitOrder
from app.settings import Settings
from queues.dramatiq_broker import (
    encode,
    enqueue_first,
    enqueue_many,
    queue_depth,
    return_dead_workers_messages,
    served_queues,
    unique_ids,
    visit_message,
    worker_threads,
)


def message(queue: str, n: int) -> dramatiq.Message[object]:
    return dramatiq.Message(
        queue_name=queue, actor_name="visit", args=(), kwargs={"n": n}, options={}
    )


def test_batch_enqueued_messages_are_consumed_by_dramatiq_in_order(settings: Settings) -> None:
    broker = make_broker(settings)
    sent = [message("contract.a", n) for n in range(5)] + [message("contract.b", 9)]
    enqueue_many(broker, sent)
    assert queue_depth(broker, "contract.a") == 5
    consumer = broker.consume("contract.a", prefetch=10, timeout=1000)
    received = [next(consumer) for _ in range(5)]
    assert [m.kwargs["n"] for m in received] == [0, 1, 2, 3, 4]
    assert [m.message_id for m in received] == [m.message_id for m in sent[:5]]
    assert [m.message_timestamp for m in received] == [m.message_timestamp for m in sent[:5]]
    for proxy in received:
        consumer.ack(proxy)
    consumer.close()
    assert queue_depth(broker, "contract.a") == 0
    assert queue_depth(broker, "contract.b") == 1


def test_batch_enqueue_runs_queue_maintenance_when_any_message_would_have(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    broker.maintenance_chance = 0  # no message draws maintenance: no dead-worker pass
    ns = broker.namespace
    dead = "dead-worker"
    broker.client.zadd(f"{ns}:__heartbeats__", {dead: 0})
    broker.client.sadd(f"{ns}:__acks__.{dead}.contract.m", "lost")
    broker.client.hset(f"{ns}:contract.m.msgs", "lost", message("contract.m", 7).encode())
    enqueue_many(broker, [message("contract.m", n) for n in range(3)])
    assert broker.client.lrange(f"{ns}:contract.m", 0, -1).count(b"lost") == 0
    broker.maintenance_chance = MAINTENANCE_SCALE  # every message draws it: the lost one returns
    enqueue_many(broker, [message("contract.m", n) for n in range(3)])
    assert broker.client.lrange(f"{ns}:contract.m", 0, -1).count(b"lost") == 1


def test_a_message_enqueued_first_is_consumed_before_those_waiting(settings: Settings) -> None:
    broker = make_broker(settings)
    enqueue_many(broker, [message("contract.f", n) for n in range(3)])
    enqueue_first(broker, message("contract.f", 99))
    consumer = broker.consume("contract.f", prefetch=1, timeout=1000)
    first = next(consumer)
    assert first.kwargs["n"] == 99
    consumer.ack(first)
    consumer.close()
    assert queue_depth(broker, "contract.f") == 3


def test_maintenance_run_now_returns_a_dead_workers_unacknowledged_message(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    ns = broker.namespace
    dead = "dead-worker"
    broker.client.zadd(f"{ns}:__heartbeats__", {dead: 0})
    broker.client.sadd(f"{ns}:__acks__.{dead}.contract.d", "lost")
    broker.client.hset(f"{ns}:contract.d.msgs", "lost", message("contract.d", 7).encode())
    return_dead_workers_messages(broker, "contract.d")
    assert broker.client.lrange(f"{ns}:contract.d", 0, -1) == [b"lost"]


def test_a_workers_queues_and_threads_are_read_from_dramatiqs_worker(settings: Settings) -> None:
    broker = make_broker(settings)
    broker.declare_queue("contract.w")
    worker = dramatiq.Worker(broker, queues={"contract.w"}, worker_threads=3)
    assert served_queues(broker, worker) == ["contract.w"]
    assert worker_threads(worker) == 3


def test_the_visit_message_carries_exactly_what_the_visit_actor_takes() -> None:
    import actors.worker

    order = VisitOrder(1, "https://x.example/a", "git", {}, 3, 0.0, request_id=None)
    sent = visit_message("visit.git.express", order, "express", 300.0)
    assert list(sent.kwargs) == list(inspect.signature(actors.worker.visit.fn).parameters)


def test_a_message_is_encoded_to_the_same_bytes_as_dramatiqs_own_encode() -> None:
    order = VisitOrder(7, "https://x.example/\u00e9t\u00e9", "git", {"branch": "main"}, 3, 1.5)
    sent = visit_message("visit.git.express", order, "express", 300.0).copy(
        options={"redis_message_id": "r-1"}
    )
    assert encode(sent) == sent.encode()
    plain = message("contract.e", 4)
    assert encode(plain) == plain.encode()


class Recorder(Middleware):
    """Records every enqueue hook Dramatiq calls on it."""

    def __init__(self, name: str, calls: list[tuple[str, str, int]]) -> None:
        self.name, self.calls = name, calls

    def before_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        assert message.options["redis_message_id"] and delay is None
        self.calls.append(("before", self.name, message.kwargs["n"]))

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        assert message.options["redis_message_id"] and delay is None
        self.calls.append(("after", self.name, message.kwargs["n"]))


class Failing(Middleware):
    """Enqueue hooks that raise ``error``: Dramatiq logs most errors and enqueues
    anyway; a MiddlewareError before the enqueue stops it."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def before_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        raise self.error

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        raise self.error


def test_batch_enqueue_calls_the_middleware_hooks_dramatiqs_enqueue_calls(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    calls: list[tuple[str, str, int]] = []
    broker.add_middleware(Recorder("first", calls))
    broker.add_middleware(Failing(RuntimeError("hook failed")))
    broker.add_middleware(Recorder("last", calls))
    for n in range(2):
        broker.enqueue(message("contract.h", n))
    dramatiqs, calls[:] = list(calls), []
    enqueue_many(broker, [message("contract.h", n) for n in range(2)])
    per_message = [c for c in dramatiqs if c[2] == 0]
    hooks_in_order = [
        ("before", "first", 0),
        ("before", "last", 0),
        ("after", "last", 0),
        ("after", "first", 0),
    ]
    assert per_message == hooks_in_order
    assert sorted(calls) == sorted(dramatiqs)
    assert [c for c in calls if c[0] == "after"][:2] == hooks_in_order[2:]
    assert queue_depth(broker, "contract.h") == 4


def test_a_middleware_error_before_enqueue_stops_the_batch_as_it_stops_dramatiqs(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    broker.add_middleware(Failing(MiddlewareError("refused")))
    with pytest.raises(MiddlewareError):
        broker.enqueue(message("contract.r", 1))
    with pytest.raises(MiddlewareError):
        enqueue_many(broker, [message("contract.r", n) for n in range(2)])
    assert queue_depth(broker, "contract.r") == 0


def test_redis_message_ids_are_distinct_uuid4_strings() -> None:
    ids = unique_ids(2000)
    assert len(set(ids)) == 2000
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
