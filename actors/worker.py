"""The worker module: ``dramatiq actors.worker --queues visit.git``.

Declares one queue per configured visit type and the ``visit`` actor, which
runs the visit type's loader and publishes the outcome to the journal. The
journal client, not the worker, updates the schedule: a visit whose status
never reaches the journal is returned by the scheduler after its cooldown.
"""

from __future__ import annotations

import logging
from functools import cache, lru_cache
from typing import Any

import dramatiq
import redis

from actors.broker import make_broker
from app.context import redis_client
from app.kafka import StatusPublisher
from app.loaders.base import Loader, get_loader
from app.queue_names import first_visits_queue, priority_queue, visit_queue
from app.settings import get_settings
from monitoring.metrics import VISIT_SECONDS, VISITS
from queues.keys import aborted_requests

log = logging.getLogger("revisit.worker")

settings = get_settings()
broker = make_broker(settings)
for _visit_type in settings.visit_types:
    broker.declare_queue(visit_queue(_visit_type))
    broker.declare_queue(priority_queue(_visit_type))
    for _prefix in settings.first_visits_prefixes:
        broker.declare_queue(first_visits_queue(_prefix, _visit_type))


@lru_cache(maxsize=1)
def publisher() -> StatusPublisher:
    """One journal producer per worker process."""
    return StatusPublisher(get_settings())


@cache
def loader_for(visit_type: str) -> Loader:
    """The loader of a visit type, loaded once."""
    return get_loader(visit_type)


@lru_cache(maxsize=1)
def _redis() -> redis.Redis:
    return redis_client(get_settings())


def _aborted(request_id: int) -> bool:
    return bool(_redis().srem(aborted_requests(get_settings().redis_namespace), request_id))


@dramatiq.actor(actor_name="visit", queue_name=visit_queue(settings.visit_types[0]), max_retries=0)
def visit(
    origin_id: int,
    url: str,
    visit_type: str,
    arguments: dict[str, Any],
    visit: int,
    scheduled_at: float,
    request_id: int | None = None,
) -> None:
    """Visit one origin and publish its statuses (created, then final) to the journal."""
    if request_id is not None and _aborted(request_id):
        log.info("request %d was cancelled; not visiting %s", request_id, url)
        return
    publisher().publish(url, visit_type, visit, "created", None)
    result = loader_for(visit_type).load(url, arguments, get_settings().git_timeout_s)
    metadata: dict[str, Any] = {"duration_s": round(result.duration_s, 3)}
    if result.error:
        metadata["error"] = result.error
    publisher().publish(url, visit_type, visit, result.status, result.snapshot, metadata)
    VISITS.labels(visit_type, result.status).inc()
    VISIT_SECONDS.labels(visit_type).observe(result.duration_s)
    log.info("visited %s: %s in %.2fs", url, result.status, result.duration_s)
