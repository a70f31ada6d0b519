"""Payloads of the lister actors of revisit's actor API (queue ``revisit.api``).

The writes of the lister interface, for listers that already send Dramatiq
messages: fire and forget, so the reads (which need an answer) go through the
RPC server instead. Each actor takes one keyword argument ``payload`` with
these fields, in JSON (datetimes as ISO 8601 with a time zone).
"""

from __future__ import annotations

from pydantic import Field

from app.inputs.api import Payload
from app.listers.models import ListedOrigin, Lister


class GetOrCreateLister(Payload):
    """Register a lister instance if new (``get_or_create_lister``)."""

    name: str = Field(min_length=1)
    instance_name: str = ""
    first_visits_queue_prefix: str | None = None


class UpdateLister(Payload):
    """Write a lister's state (``update_lister``); a stale ``updated`` is refused and
    the message dead-lettered with StaleData."""

    lister: Lister


class RecordListedOrigins(Payload):
    """Upsert listed origins of registered listers (``record_listed_origins``)."""

    listed_origins: list[ListedOrigin] = Field(max_length=100_000)
