"""Payloads of revisit's remote API: the messages of its Dramatiq actors.

Any service can enqueue them with only the Dramatiq client; ``app.client``
validates them with these models before sending, and the actors validate
them again on receipt.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar, get_args

import msgspec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from app.inputs.listing import ListedOriginIn, listed_origin
from app.inputs.rules import MAX_TIMESTAMP_S, LoaderArguments, OriginUrl, StoredText

#: Who asks for a one-shot visit (a label of the request latency metric, so a
#: closed list).
RequestKind = Literal["save_code_now", "operator", "add_forge_now"]
REQUEST_KINDS: tuple[str, ...] = get_args(RequestKind)
#: Bounds of a request's effective priority (base + adjustment).
MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
#: Most origins one record_listing message may carry.
MAX_ORIGINS_PER_MESSAGE = 100_000
#: Most prerequisites one request may name.
MAX_PREREQUISITES = 1000
#: A request's id.
RequestId = Annotated[int, Field(ge=1, lt=2**63)]
#: Largest payload the client sends (JSON bytes): one Redis value, held whole
#: in a worker's memory.
MAX_PAYLOAD_BYTES = 32 * 1024 * 1024


class Payload(BaseModel):
    """A message's payload: unknown fields refused, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RequestVisit(Payload):
    """Ask for a one-shot visit ("save code now"), served before recurrent visits."""

    url: OriginUrl
    visit_type: str = Field(min_length=1, max_length=100)
    priority: int | None = Field(
        default=None,
        ge=MIN_PRIORITY,
        le=MAX_PRIORITY,
        description="base priority (default: the parent's effective priority, else 0)",
    )
    kind: RequestKind = "save_code_now"
    requested_by: StoredText | None = Field(default=None, max_length=200)
    extra_loader_arguments: LoaderArguments = Field(default_factory=dict)
    external_id: StoredText | None = Field(
        default=None, max_length=200, description="caller's key: asking twice makes one request"
    )
    depends_on: list[RequestId] = Field(
        default_factory=list,
        max_length=MAX_PREREQUISITES,
        description="prerequisites: the request waits blocked until each completed",
    )
    allowed_to_fail: list[RequestId] = Field(
        default_factory=list,
        max_length=MAX_PREREQUISITES,
        description="prerequisites (of depends_on) whose failure does not abort this request",
    )
    parent: RequestId | None = Field(
        default=None, description="the request this one is made for (its priority by default)"
    )

    @field_validator("allowed_to_fail")
    @classmethod
    def _among_prerequisites(cls, value: list[int], info: ValidationInfo) -> list[int]:
        others = sorted(set(value) - set(info.data.get("depends_on", value)))
        if others:
            raise ValueError(f"request {others[0]} is not in depends_on")
        return value


class AdjustPriority(Payload):
    """Add ``delta`` to a blocked or pending request's priority adjustment (operators)."""

    request_id: int = Field(ge=1)
    delta: int = Field(ge=MIN_PRIORITY - MAX_PRIORITY, le=MAX_PRIORITY - MIN_PRIORITY)


class AddForge(Payload):
    """Add forge now: schedule a forge's lister, run its full listing now as a
    request, then the first visits of what it lists as requests waiting for it."""

    lister: str = Field(min_length=1, max_length=100, description="installed lister")
    instance: StoredText = Field(min_length=1, max_length=200)
    url: OriginUrl = Field(description="the forge's URL (the listing request's)")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the lister's")
    priority: int | None = Field(
        default=None,
        ge=MIN_PRIORITY,
        le=MAX_PRIORITY,
        description="base priority (default: the add_forge_now template's)",
    )
    requested_by: StoredText | None = Field(default=None, max_length=200)


class CancelRequest(Payload):
    """Abort a blocked, pending, scheduled or running request (a running visit
    is stopped) and the open requests made for it."""

    request_id: int = Field(ge=1, lt=2**63)
    by: StoredText | None = Field(
        default=None, max_length=200, description="who aborts it (kept in its reason)"
    )


def _listed_origin(value: Any) -> ListedOriginIn:
    try:
        return listed_origin(value)
    except ValueError as exc:
        field, _, message = str(exc).partition(": ")
        context = {"field": "" if field == "(row)" else field, "message": message}
        raise PydanticCustomError("listed_origin", "{message}", context) from None


#: A listed origin inside a pydantic payload: validated by its one (msgspec)
#: declaration, sent as its JSON fields.
ListedOriginField = Annotated[
    ListedOriginIn, PlainValidator(_listed_origin), PlainSerializer(msgspec.to_builtins)
]


class RecordListing(Payload):
    """A batch of a lister's output; ``full`` with ``last_batch`` ends a full listing."""

    lister_name: StoredText = Field(min_length=1, max_length=200)
    instance_name: StoredText = Field(min_length=1, max_length=200)
    origins: list[ListedOriginField] = Field(max_length=MAX_ORIGINS_PER_MESSAGE)
    full: bool = False
    listing_started_at: float | None = Field(
        default=None,
        ge=0,
        le=MAX_TIMESTAMP_S,
        allow_inf_nan=False,
        description="unix time the listing began (full listings)",
    )
    last_batch: bool = True
    allow_mass_disable: bool = Field(
        default=False,
        description="let a full listing disable more than half of the lister's origins",
    )


class InvalidPayload(ValueError):
    """A message whose payload does not validate; the text names the field."""


Model = TypeVar("Model", bound=BaseModel)


def first_error(exc: ValidationError, whole: str) -> str:
    """'field: message' of the first error (``whole`` when it is about no field)."""
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    if first["type"] == "listed_origin" and first["ctx"]["field"]:
        loc.append(first["ctx"]["field"])  # named by the listed origin's own decoder
    return f"{'.'.join(loc) or whole}: {first['msg']}"


def validated(model: type[Model], payload: Any) -> Model:
    """``payload`` as ``model``, or InvalidPayload naming the model and the first bad field."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise InvalidPayload(f"{model.__name__}: {first_error(exc, 'payload')}") from None
