"""A typed client of revisit's actor API: validates with pydantic, then enqueues.

    from app.client import RevisitClient
    client = RevisitClient.from_settings()
    client.request_visit(url="https://example.org/repo.git", visit_type="git", priority=10)

Bad arguments raise InvalidPayload naming the field before anything is sent.
"""

from __future__ import annotations

import json
from typing import Any, Self

import dramatiq
from pydantic import BaseModel

from app.domain.queue_names import API_QUEUE
from app.inputs.api import (
    MAX_PAYLOAD_BYTES,
    AddForge,
    AdjustPriority,
    CancelRequest,
    InvalidPayload,
    RecordListing,
    RequestVisit,
    validated,
)
from app.settings import Settings, get_settings
from queues.dramatiq_broker import redis_broker


def _checked(model: type[BaseModel], fields: dict[str, Any]) -> dict[str, Any]:
    payload = validated(model, fields).model_dump(mode="json")
    size = len(json.dumps(payload, separators=(",", ":")).encode())
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidPayload(
            f"{model.__name__}: payload of {size} bytes, more than {MAX_PAYLOAD_BYTES}: "
            "send it in smaller batches"
        )
    return payload


class RevisitClient:
    """Sends revisit API messages through a Dramatiq broker."""

    def __init__(self, broker: dramatiq.Broker) -> None:
        self.broker = broker

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Self:
        """A client on the Redis broker of ``settings`` (REVISIT_* environment)."""
        settings = settings or get_settings()
        return cls(redis_broker(settings))

    def _send(self, actor: str, model: type[BaseModel], fields: dict[str, Any]) -> str:
        payload = _checked(model, fields)
        message: dramatiq.Message[Any] = dramatiq.Message(
            queue_name=API_QUEUE,
            actor_name=actor,
            args=(),
            kwargs={"payload": payload},
            options={},
        )
        self.broker.enqueue(message)
        return str(message.message_id)

    def request_visit(self, **fields: Any) -> str:
        """Ask for a one-shot visit (fields of app.inputs.api.RequestVisit)."""
        return self._send("request_visit", RequestVisit, fields)

    def adjust_priority(self, request_id: int, delta: int) -> str:
        """Add ``delta`` to a blocked or pending request's priority."""
        return self._send(
            "adjust_priority", AdjustPriority, {"request_id": request_id, "delta": delta}
        )

    def cancel_request(self, request_id: int, by: str | None = None) -> str:
        """Abort a blocked, pending, scheduled or running request (its visit is
        stopped) and the open requests made for it; ``by``: who."""
        return self._send("cancel_request", CancelRequest, {"request_id": request_id, "by": by})

    def add_forge(self, **fields: Any) -> str:
        """Add forge now (fields of app.inputs.api.AddForge)."""
        return self._send("add_forge", AddForge, fields)

    def record_listing(self, **fields: Any) -> str:
        """Send a batch of a lister's origins (fields of app.inputs.api.RecordListing)."""
        return self._send("record_listing", RecordListing, fields)
