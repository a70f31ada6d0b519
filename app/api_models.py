"""Payloads of revisit's remote API: the messages of its Dramatiq actors.

Any service can enqueue them with only the Dramatiq client; ``app.client``
validates them with these models before sending, and the actors validate
them again on receipt.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.listing_input import ListedOriginIn


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RequestVisit(_Payload):
    """Ask for a one-shot visit ("save code now"), served before recurrent visits."""

    url: str = Field(min_length=1, max_length=4096)
    visit_type: str = Field(min_length=1)
    priority: int = Field(default=0, ge=-1000, le=1000, description="base priority")
    kind: str = Field(default="save_code_now", pattern=r"^[a-z_]{1,40}$")
    requested_by: str | None = Field(default=None, max_length=200)
    extra_loader_arguments: dict[str, Any] = Field(default_factory=dict)
    external_id: str | None = Field(
        default=None, max_length=200, description="caller's key: asking twice makes one request"
    )


class AdjustPriority(_Payload):
    """Add ``delta`` to a pending request's priority adjustment (operators)."""

    request_id: int = Field(ge=1)
    delta: int = Field(ge=-10000, le=10000)


class CancelRequest(_Payload):
    """Abort a pending or scheduled request."""

    request_id: int = Field(ge=1)


class RecordListing(_Payload):
    """A batch of a lister's output; ``full`` with ``last_batch`` ends a full listing."""

    lister_name: str = Field(min_length=1)
    instance_name: str = Field(min_length=1)
    origins: list[ListedOriginIn] = Field(max_length=100_000)
    full: bool = False
    listing_started_at: float | None = Field(
        default=None, description="unix time the listing began (full listings)"
    )
    last_batch: bool = True


class InvalidPayload(ValueError):
    """A message whose payload does not validate; the text names the field."""


Model = TypeVar("Model", bound=BaseModel)


def first_error(exc: ValidationError, whole: str) -> str:
    """'field: message' of the first error (``whole`` when it is about no field)."""
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or whole}: {first['msg']}"


def validated(model: type[Model], payload: Any) -> Model:
    """``payload`` as ``model``, or InvalidPayload naming the model and the first bad field."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise InvalidPayload(f"{model.__name__}: {first_error(exc, 'payload')}") from None
