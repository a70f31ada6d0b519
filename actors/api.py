"""revisit's remote API: Dramatiq actors any service can enqueue to.

Consumed by ``revisit api`` (Procfile ``api``). Payloads are documented by
``app.inputs.api`` and validated on receipt: a bad one is refused with the
field named, nothing is written, and Dramatiq dead-letters it (no retry), the
credentials of its URLs redacted (``actors.dead_letter_reasons``).

Send them with ``app.client.RevisitClient``, or with any Dramatiq client:
actor names ``request_visit``, ``adjust_priority``, ``cancel_request``, ``add_forge``,
``record_listing``, queue ``revisit.api``, one keyword argument ``payload``
holding the model's fields.

The lister interface's writes share the queue: ``get_or_create_lister``,
``update_lister``, ``record_listed_origins`` (payloads in
``app.listers.api_models``). An unknown visit type, an unregistered lister or
a stale ``updated`` is refused the same way.

The actors of a process share its PostgreSQL connections
(``actors.broker.connection``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import dramatiq
import psycopg

from actors.broker import connection, context, make_broker, utc_now
from app.db.connection import DictConnection
from app.db.listings import UnknownLister, find_lister
from app.domain.queue_names import API_QUEUE
from app.inputs.api import (
    AddForge,
    AdjustPriority,
    CancelRequest,
    InvalidPayload,
    RecordListing,
    RequestVisit,
    validated,
)
from app.inputs.listing import ListingInputError
from app.listers.api_models import GetOrCreateLister, RecordListedOrigins, UpdateLister
from app.listers.forges import add_forge as add_forge_now
from app.listers.interface import ListerInterface
from app.services import requests as req
from app.services.listing import MAX_DISABLE_SHARE, MassDisable, finish_listing
from app.services.listing import record_listed_origins as record_listing_origins
from app.settings import get_settings

log = logging.getLogger("revisit.api")
broker = make_broker(get_settings())
broker.declare_queue(API_QUEUE)


# The actors return nothing: without a results backend Dramatiq would discard
# the value with a warning on every call. What they did is logged instead.
@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def request_visit(payload: Any) -> None:
    """Record a one-shot visit request."""
    request = validated(RequestVisit, payload)
    with connection() as conn, _bad_input("RequestVisit"):
        request_id = req.create_request(conn, request)
    log.info("request %d: visit %s (%s)", request_id, request.url, request.visit_type)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def adjust_priority(payload: Any) -> None:
    """Add to a blocked or pending request's priority adjustment."""
    change = validated(AdjustPriority, payload)
    with connection() as conn, _bad_input("AdjustPriority"):
        priority = req.adjust_priority(conn, change.request_id, change.delta)
    log.info("request %d: priority %d", change.request_id, priority)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def add_forge(payload: Any) -> None:
    """Add forge now: schedule the lister, list now, then first-visit what it lists."""
    forge = validated(AddForge, payload)
    with connection() as conn, _bad_input("AddForge"):
        request_id = add_forge_now(conn, forge, utc_now())
    log.info("request %d: add forge now %s/%s", request_id, forge.lister, forge.instance)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def cancel_request(payload: Any) -> None:
    """Abort a blocked, pending, scheduled or running request and what was made for it."""
    cancel = validated(CancelRequest, payload)
    ctx = context()
    with connection() as conn, _bad_input("CancelRequest"):
        req.cancel_request(
            conn, ctx.redis, ctx.settings.redis_namespace, cancel.request_id, utc_now(), cancel.by
        )


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def record_listing(payload: Any) -> None:
    """Record a batch of a lister's origins.

    The lister must be registered (``revisit lister register``, as for the
    CLI's import) and every origin's visit type known: both are checked
    before anything is written.
    """
    listing = validated(RecordListing, payload)
    ctx = context()
    now = utc_now()
    rows = list(enumerate(listing.origins, start=1))
    with connection() as conn, _bad_input("RecordListing"):
        try:
            lister = find_lister(conn, listing.lister_name, listing.instance_name)["id"]
        except UnknownLister as exc:
            raise InvalidPayload(f"RecordListing: lister_name/instance_name: {exc}") from None
        count = record_listing_origins(conn, ctx, lister, rows, now)
        if listing.last_batch:
            started = (
                datetime.fromtimestamp(listing.listing_started_at, tz=UTC)
                if listing.listing_started_at is not None
                else now
            )
            share = 1.0 if listing.allow_mass_disable else MAX_DISABLE_SHARE
            finish_listing(
                conn, ctx, lister, started, now, full=listing.full, max_disable_share=share
            )
    log.info("listing of %s/%s: %d origins", listing.lister_name, listing.instance_name, count)


@contextlib.contextmanager
def _bad_input(model: str) -> Iterator[None]:
    """Values the database or the listing rules refuse are bad input, named as such."""
    try:
        yield
    except (ListingInputError, MassDisable, req.RequestError) as exc:
        raise InvalidPayload(f"{model}: {exc}") from None
    except psycopg.DataError as exc:
        raise InvalidPayload(f"{model}: PostgreSQL refused a value: {exc}") from None


def _listers(conn: DictConnection) -> ListerInterface:
    return ListerInterface(conn, context(), utc_now)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def get_or_create_lister(payload: Any) -> None:
    """Register the lister instance if new."""
    asked = validated(GetOrCreateLister, payload)
    with connection() as conn:
        lister = _listers(conn).get_or_create_lister(**asked.model_dump())
    log.info("lister %s/%s: %s", lister.name, lister.instance_name, lister.id)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def update_lister(payload: Any) -> None:
    """Write the lister's state, refusing a stale ``updated``."""
    asked = validated(UpdateLister, payload)
    with connection() as conn:
        _listers(conn).update_lister(asked.lister)


@dramatiq.actor(queue_name=API_QUEUE, max_retries=0)
def record_listed_origins(payload: Any) -> None:
    """Record listed origins (all or nothing per lister)."""
    asked = validated(RecordListedOrigins, payload)
    with connection() as conn:
        recorded = _listers(conn).record_listed_origins(asked.listed_origins)
    log.info("recorded %d listed origins", len(recorded))
