"""The lister interface's writes on revisit's actor API (queue ``revisit.api``).

Loaded by the ``revisit api`` process with ``actors.api``. Actor names
``get_or_create_lister``, ``update_lister``, ``record_listed_origins``; one
keyword argument ``payload`` (``app.listers.api_models``). A bad payload,
an unknown visit type, an unregistered lister or a stale ``updated`` is
refused with the field named, nothing is written, and the message is
dead-lettered (no retry).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import dramatiq

from actors.api import _conn, _ctx
from app.api_models import validated
from app.listers.api_models import GetOrCreateLister, RecordListedOrigins, UpdateLister
from app.listers.interface import ListerInterface
from app.queue_names import API_QUEUE

log = logging.getLogger("revisit.api")


def _now() -> datetime:
    return datetime.now(tz=UTC)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def get_or_create_lister(payload: Any) -> str:
    """Register the lister instance if new; returns its id."""
    asked = validated(GetOrCreateLister, payload)
    with _conn() as conn:
        lister = ListerInterface(conn, _ctx(), _now).get_or_create_lister(**asked.model_dump())
    return str(lister.id)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def update_lister(payload: Any) -> None:
    """Write the lister's state, refusing a stale ``updated``."""
    asked = validated(UpdateLister, payload)
    with _conn() as conn:
        ListerInterface(conn, _ctx(), _now).update_lister(asked.lister)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def record_listed_origins(payload: Any) -> int:
    """Record listed origins (all or nothing per lister); returns how many."""
    asked = validated(RecordListedOrigins, payload)
    with _conn() as conn:
        recorded = ListerInterface(conn, _ctx(), _now).record_listed_origins(asked.listed_origins)
    log.info("recorded %d listed origins", len(recorded))
    return len(recorded)
