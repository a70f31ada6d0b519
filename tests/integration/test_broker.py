"""The contract of queues/dramatiq_broker.py with the installed Dramatiq: its batch enqueue
run by a real worker as Dramatiq runs what it sends, and the undocumented parts it relies
on (the Redis key layout, the dispatch commands, the worker's attributes)."""

import inspect
import threading
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.redis import MAINTENANCE_SCALE
from dramatiq.middleware import CurrentMessage, Middleware, MiddlewareError

from actors.broker import make_broker
from app.services.scheduling import VisitOrder
from app.settings import Settings
from queues.dramatiq_broker import (
    enqueue_first,
    enqueue_many,
    queue_depth,
    return_dead_workers_messages,
    served_queues,
    visit_message,
    worker_threads,
)
from queues.dramatiq_queues import depths
from queues.keys import DramatiqQueueKeys, dramatiq_heartbeats, uncounted_messages
from tests.processes import wait_for


def message(queue: str, n: int) -> dramatiq.Message[object]:
    return dramatiq.Message(
        queue_name=queue, actor_name="visit", args=(), kwargs={"n": n}, options={}
    )


def test_a_batch_is_run_by_a_real_worker_as_dramatiq_runs_what_it_sends(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    broker.add_middleware(CurrentMessage())
    runs: list[tuple[str, int, str, int]] = []  # how sent, n, message id, retries so far
    lock = threading.Lock()

    def fails_once(how: str, n: int) -> None:
        current = CurrentMessage.get_current_message()
        assert current is not None
        retries = int(current.options.get("retries", 0))
        with lock:
            runs.append((how, n, current.message_id, retries))
        if retries == 0:
            raise RuntimeError("the first run of every message fails")

    actor = dramatiq.actor(
        fails_once,
        actor_name="contract_fails_once",
        queue_name="contract.run",
        max_retries=1,
        min_backoff=10,
        max_backoff=20,
        broker=broker,
    )
    sent = [actor.send("send", n) for n in range(3)]
    batch = enqueue_many(broker, [actor.message("batch", n) for n in range(3)])
    assert queue_depth(broker, "contract.run") == 6
    ids = [m.message_id for m in sent + batch]
    assert len(set(ids)) == 6
    assert len({m.options["redis_message_id"] for m in sent + batch}) == 6
    worker = dramatiq.Worker(broker, queues={"contract.run"}, worker_threads=2, worker_timeout=100)
    worker.start()
    try:
        wait_for(lambda: len(runs) == 12, 30, "each message run twice (one retry)")
        wait_for(lambda: queue_depth(broker, "contract.run") == 0, 10, "the queue emptied")
    finally:
        worker.stop()
    for how in ("send", "batch"):
        done = sorted((n, retries) for h, n, _, retries in runs if h == how)
        assert done == [(n, r) for n in range(3) for r in (0, 1)]
    assert sorted(i for *_, i, _ in runs) == sorted(ids * 2)


def test_batch_enqueued_messages_are_stored_encoded_by_dramatiqs_encoder(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    order = VisitOrder(7, "https://x.example/\u00e9t\u00e9", "git", {"branch": "main"}, 3, 1.5)
    [stored] = enqueue_many(broker, [visit_message("contract.e", order, "express", 300.0)])
    keys = DramatiqQueueKeys(broker.namespace, "contract.e")
    redis_id = stored.options["redis_message_id"]
    assert broker.client.hget(keys.messages, redis_id) == dramatiq.get_encoder().encode(
        stored.asdict()
    )
    assert broker.client.lrange(keys.waiting, 0, -1) == [redis_id.encode()]


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


def test_a_queues_depth_counts_its_visits_and_not_the_late_statuses_sent_to_it(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    queue = "contract.depth"
    enqueue_many(broker, [message(queue, n) for n in range(3)])
    late = dramatiq.Message(
        queue_name=queue, actor_name="publish_status", args=(), kwargs={}, options={}
    )
    broker.enqueue(late)
    broker.enqueue(late, delay=60_000)  # a retry waiting out its backoff
    assert queue_depth(broker, queue) == 3
    assert depths(broker.client, [queue])[queue].others == 2


def test_a_late_status_that_left_its_queue_is_no_longer_left_out_of_its_depth(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    queue = "contract.depth_drained"
    late = dramatiq.Message(
        queue_name=queue, actor_name="publish_status", args=(), kwargs={}, options={}
    )
    broker.enqueue(late)
    consumer = broker.consume(queue, prefetch=10, timeout=1000)
    consumer.ack(next(consumer))
    consumer.close()
    enqueue_many(broker, [message(queue, n) for n in range(2)])
    assert queue_depth(broker, queue) == 2
    assert broker.client.scard(uncounted_messages(broker.namespace, queue)) == 0


def lost_message(broker: dramatiq.Broker, queue: str) -> DramatiqQueueKeys:
    """A message held unacknowledged by a worker whose heartbeat stopped long ago."""
    keys = DramatiqQueueKeys(broker.namespace, queue)  # type: ignore[attr-defined]
    client = broker.client  # type: ignore[attr-defined]
    client.zadd(dramatiq_heartbeats(keys.namespace), {"dead-worker": 0})
    client.sadd(keys.acks("dead-worker"), "lost")
    client.hset(keys.messages, "lost", message(queue, 7).encode())
    return keys


def test_batch_enqueue_draws_queue_maintenance_as_dramatiqs_enqueue_does(
    settings: Settings,
) -> None:
    broker = make_broker(settings)
    keys = lost_message(broker, "contract.m")
    broker.maintenance_chance = 0  # no enqueue draws maintenance: no dead-worker pass
    enqueue_many(broker, [message("contract.m", n) for n in range(3)])
    assert broker.client.lrange(keys.waiting, 0, -1).count(b"lost") == 0
    broker.maintenance_chance = MAINTENANCE_SCALE  # every enqueue draws it: the lost one returns
    enqueue_many(broker, [message("contract.m", n) for n in range(3)])
    assert broker.client.lrange(keys.waiting, 0, -1).count(b"lost") == 1


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
    keys = lost_message(broker, "contract.d")
    chance = broker.maintenance_chance
    return_dead_workers_messages(broker, "contract.d")
    assert broker.client.lrange(keys.waiting, 0, -1) == [b"lost"]
    assert broker.maintenance_chance == chance  # Dramatiq's own chance is left as it was


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
