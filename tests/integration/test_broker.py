"""enqueue_many against Dramatiq's own consumer: the contract of the batch enqueue."""

import dramatiq
from dramatiq.brokers.redis import MAINTENANCE_SCALE

from actors.broker import make_broker
from app.settings import Settings
from queues.dramatiq_broker import enqueue_many, queue_depth


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
