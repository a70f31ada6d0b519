"""Metrics of the Dramatiq processes (worker, api): Dramatiq's Prometheus
middleware, working with several worker processes and pools.

Dramatiq forks processes, so prometheus_client must run in multiprocess mode,
which it chooses when first imported: ``revisit worker`` and ``revisit api``
put ``PROMETHEUS_MULTIPROC_DIR`` (one per port) and Dramatiq's exporter
settings in the environment before Dramatiq starts (``worker_metrics_env``),
and the exporter serves only the families a Dramatiq process owns
(``worker_registry``).
"""

from __future__ import annotations

import multiprocessing
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from dramatiq.middleware import prometheus as dramatiq_prometheus
from dramatiq.middleware.prometheus import Prometheus
from prometheus_client import CollectorRegistry, start_http_server

from app.loaders.zygote import die_with_parent
from app.settings import Settings
from monitoring.lanes import lane_of
from monitoring.metrics import VISIT_LANE_SECONDS, WORKER_OWNED
from monitoring.multiprocess import MULTIPROC_ENV, OwnedFiles, fresh_directory


def worker_metrics_env(settings: Settings) -> dict[str, str]:
    """The environment a Dramatiq process needs to export its metrics, its
    multiprocess directory emptied; nothing when ``metrics_port`` is 0."""
    if not settings.metrics_port:
        return {}
    name = f"revisit-metrics-{settings.metrics_port}"  # a directory per port: per pool
    directory = fresh_directory(Path(tempfile.gettempdir()) / name)
    return {
        MULTIPROC_ENV: str(directory),
        "dramatiq_prom_db": str(directory),
        "dramatiq_prom_host": settings.metrics_address,
        "dramatiq_prom_port": str(settings.metrics_port),
    }


#: Metric families of Dramatiq's own middleware start with this.
DRAMATIQ_PREFIX = "dramatiq_"


def worker_registry(directory: str | Path) -> CollectorRegistry:
    """What a Dramatiq process's exporter serves: the families a Dramatiq
    process owns (the others are other processes' metrics, at zero here)."""
    registry = CollectorRegistry()
    registry.register(OwnedFiles(directory, WORKER_OWNED, (DRAMATIQ_PREFIX,)))
    return registry


def serve_worker_metrics() -> int:
    """The exporter process Dramatiq forks (in place of its own): serves
    ``worker_registry`` on ``dramatiq_prom_host``:``dramatiq_prom_port``, until
    told to stop, or its pool's main process dies (its port is then free for the
    pool started again)."""
    parent = multiprocessing.parent_process()
    die_with_parent(signal.SIGTERM, parent.pid if parent else None)
    registry = worker_registry(dramatiq_prometheus.DB_PATH)
    _, serving = start_http_server(
        dramatiq_prometheus.HTTP_PORT, dramatiq_prometheus.HTTP_HOST, registry
    )
    serving.join()
    return 0


class WorkerMetrics(Prometheus):
    """Dramatiq's Prometheus middleware, plus visit durations by visit type and lane.

    Added only to the processes started with a multiprocess directory
    (``in_multiprocess_mode``): elsewhere it would export nothing.
    """

    def __init__(self) -> None:
        super().__init__()
        self._visit_started: dict[str, float] = {}
        self._delayed: dict[tuple[str, str], set[str]] = {}

    @property
    def forks(self) -> list[Any]:
        return [serve_worker_metrics]

    # Dramatiq adds one on each delay and takes one off when the message runs,
    # so a message delayed twice before it runs stays counted for good; the
    # gauge is set here to the size of this process's set of delayed ids.
    def before_delay_message(self, broker: Any, message: Any) -> None:
        key = (message.queue_name, message.actor_name)
        ids = self._delayed.setdefault(key, set())
        ids.add(message.message_id)
        self.inprogress_delayed_messages.labels(*key).set(len(ids))

    def before_process_message(self, broker: Any, message: Any) -> None:
        key = (message.queue_name, message.actor_name)
        ids = self._delayed.get(key)
        if ids is not None and message.message_id in ids:
            ids.discard(message.message_id)
            self.inprogress_delayed_messages.labels(*key).set(len(ids))
        super().before_process_message(broker, message)  # type: ignore[no-untyped-call]
        self._visit_started[message.message_id] = time.monotonic()

    def after_process_message(
        self, broker: Any, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        super().after_process_message(  # type: ignore[no-untyped-call]
            broker, message, result=result, exception=exception
        )
        started = self._visit_started.pop(message.message_id, None)
        visit_type = message.kwargs.get("visit_type")
        if started is not None and message.actor_name == "visit" and visit_type:
            lane = message.options.get("lane") or lane_of(message.queue_name, visit_type)
            VISIT_LANE_SECONDS.labels(visit_type, lane).observe(time.monotonic() - started)

    def after_skip_message(
        self, broker: Any, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        super().after_process_message(broker, message)  # type: ignore[no-untyped-call]
        self._visit_started.pop(message.message_id, None)
