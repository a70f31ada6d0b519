"""The Dramatiq broker every revisit process shares (``queues.dramatiq_broker.redis_broker``),
with revisit's middleware."""

from __future__ import annotations

import multiprocessing
import signal
from typing import Any

import dramatiq
from dramatiq.brokers.redis import DEFAULT_DEAD_MESSAGE_TTL, RedisBroker
from dramatiq.middleware import Retries

from actors.dead_letter_reasons import DeadLetterReasons
from actors.undecodable import SWEEP_INTERVAL_S, SweepUndecodable
from app.loaders.zygote import die_with_parent
from app.services.context import redis_client
from app.settings import Settings
from monitoring.dramatiq_metrics import WorkerMetrics
from queues.dramatiq_broker import LeaveOutOfDepth, redis_broker
from queues.keys import DRAMATIQ_NAMESPACE

#: Actors whose messages are sent to a visit's queue but are not visits: a final
#: status the visit could not publish in time (``actors.worker.publish_status``).
NOT_VISITS = frozenset({"publish_status"})


class DieWithParent(dramatiq.Middleware):
    """Each worker process of a Dramatiq pool is told to stop (SIGTERM, as the
    pool's main process would tell it) when that main process dies: killed
    (kill -9), it would otherwise leave its children running visits, orphans
    no one stops. (Its metrics exporter does the same: ``serve_worker_metrics``.)"""

    def after_process_boot(self, broker: Any) -> None:
        parent = multiprocessing.parent_process()
        die_with_parent(signal.SIGTERM, parent.pid if parent else None)


def make_broker(settings: Settings) -> RedisBroker:
    """A Redis broker configured from ``settings``, set as Dramatiq's global broker.

    Its Prometheus middleware exports only in processes started with a
    multiprocess directory (``revisit worker`` and ``revisit api``).
    """
    broker = redis_broker(settings)
    broker.add_middleware(WorkerMetrics())
    broker.add_middleware(LeaveOutOfDepth(NOT_VISITS))
    broker.add_middleware(DieWithParent())
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
