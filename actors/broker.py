"""The Dramatiq broker every revisit process shares (``queues.dramatiq_broker.redis_broker``),
with revisit's middleware."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import DEFAULT_DEAD_MESSAGE_TTL, RedisBroker
from dramatiq.middleware import Retries

from actors.dead_letter_reasons import DeadLetterReasons
from actors.undecodable import SWEEP_INTERVAL_S, SweepUndecodable
from app.services.context import redis_client
from app.settings import Settings
from monitoring.dramatiq_metrics import WorkerMetrics
from queues.dramatiq_broker import redis_broker
from queues.keys import DRAMATIQ_NAMESPACE


def make_broker(settings: Settings) -> RedisBroker:
    """A Redis broker configured from ``settings``, set as Dramatiq's global broker.

    Its Prometheus middleware exports only in processes started with a
    multiprocess directory (``revisit worker`` and ``revisit api``).
    """
    broker = redis_broker(settings)
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
            DRAMATIQ_NAMESPACE,
            settings.redis_namespace,
            SWEEP_INTERVAL_S,
        )
    )
    dramatiq.set_broker(broker)
    return broker
