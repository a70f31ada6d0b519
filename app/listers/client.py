"""A typed client of the lister actors: validates with pydantic, then enqueues.

    from app.listers.client import ListerClient
    ListerClient.from_settings().record_listed_origins(listed_origins=[...])

Bad arguments raise InvalidPayload naming the field before anything is sent.
"""

from __future__ import annotations

from typing import Any

from app.client import RevisitClient
from app.listers.api_models import GetOrCreateLister, RecordListedOrigins, UpdateLister


class ListerClient(RevisitClient):
    """Sends the lister interface's writes through a Dramatiq broker."""

    def get_or_create_lister(self, **fields: Any) -> str:
        """Register a lister instance if new (fields of GetOrCreateLister)."""
        return self._send("get_or_create_lister", GetOrCreateLister, fields)

    def update_lister(self, lister: Any) -> str:
        """Write a lister's state (a Lister or its fields, ``id`` and ``updated`` included)."""
        return self._send("update_lister", UpdateLister, {"lister": lister})

    def record_listed_origins(self, listed_origins: list[Any]) -> str:
        """Record listed origins (ListedOrigin or their fields)."""
        return self._send(
            "record_listed_origins", RecordListedOrigins, {"listed_origins": listed_origins}
        )
