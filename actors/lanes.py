"""Moving a visit that outlasted the express lane to the head of the slow lane.

Dramatiq's Redis broker has no priority within a queue; the slow lane must
take express time-outs first (seed 003), so they are pushed to the head of
its list (its consumers pop from the head) instead of the tail.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis

# KEYS[1] <ns>:<queue>.msgs  hash  message id -> encoded message
# KEYS[2] <ns>:<queue>       list  message ids, consumed from the head
# ARGV[1] message id, ARGV[2] encoded message
_ENQUEUE_FIRST = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('LPUSH', KEYS[2], ARGV[1])
"""


def enqueue_first(broker: RedisBroker, message: dramatiq.Message[Any]) -> None:
    """Enqueue ``message`` at the head of its queue (served before the others)."""
    message = message.copy(options={"redis_message_id": str(uuid4())})
    broker.declare_queue(message.queue_name)
    broker.emit_before("enqueue", message, None)
    queue = f"{broker.namespace}:{message.queue_name}"
    broker.client.eval(
        _ENQUEUE_FIRST,
        2,
        f"{queue}.msgs",
        queue,
        message.options["redis_message_id"],
        message.encode(),
    )
    broker.emit_after("enqueue", message, None)


def slow_lane_message(
    kwargs: dict[str, Any], slow_queue: str, time_limit_ms: int
) -> dramatiq.Message[Any]:
    """The slow-lane visit of an express visit that ran out of time, marked as such."""
    return dramatiq.Message(
        queue_name=slow_queue,
        actor_name="visit",
        args=(),
        kwargs={**kwargs, "lane": "slow"},
        options={"time_limit": time_limit_ms, "timed_out_express": True},
    )


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
