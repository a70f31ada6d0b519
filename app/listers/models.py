"""The objects of the lister interface, field for field the reference's models.

Listers written for the reference scheduler exchange these (``Lister``,
``ListedOrigin``, ``OriginVisitStats``), so their fields and meanings are the
reference's. Inputs are validated here: a bad one raises ListerInputError
naming the field, before anything is written.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    validate_call,
)

from app.inputs.api import Model, first_error


class ListerInputError(ValueError):
    """An argument of the lister interface is invalid; the text names the field."""


class StaleData(Exception):
    """The lister's ``updated`` stamp is not the stored one: someone wrote it since
    the caller read it (the reference's ``swh.scheduler.exc.StaleData``)."""


def _json_object(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse what PostgreSQL's jsonb cannot hold (bytes, NaN...), naming no field:
    pydantic adds the field's name."""
    if not value:  # the common case, and always representable
        return value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not representable as JSON: {exc}") from None
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_json_object)]


class ReferenceModel(BaseModel):
    # Unknown fields are ignored, not refused: a newer reference client may
    # send fields revisit does not know yet.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Lister(ReferenceModel):
    """A lister instance and the opaque state it keeps between runs."""

    name: str = Field(min_length=1)
    instance_name: str = ""
    id: UUID | None = None
    current_state: JsonObject = Field(default_factory=dict)
    created: AwareDatetime | None = None
    updated: AwareDatetime | None = None
    last_listing_finished_at: AwareDatetime | None = None
    first_visits_queue_prefix: str | None = None
    first_visits_scheduled_at: AwareDatetime | None = None


class ListedOrigin(ReferenceModel):
    """An origin as a lister reports it; (lister_id, url, visit_type) is its key."""

    lister_id: UUID
    url: str = Field(min_length=1, max_length=4096)
    visit_type: str = Field(min_length=1)
    extra_loader_arguments: JsonObject = Field(default_factory=dict)
    last_update: AwareDatetime | None = None
    is_fork: bool | None = None
    forked_from_url: str | None = None
    enabled: bool = True
    first_seen: AwareDatetime | None = None
    last_seen: AwareDatetime | None = None


class ListedOriginPage(ReferenceModel):
    """One page of listed origins; pass ``next_page_token`` back for the next one
    (None: this was the last page)."""

    results: list[ListedOrigin]
    next_page_token: tuple[str, str, str] | None


class OriginVisitStats(ReferenceModel):
    """What the scheduler knows of the visits of one (url, visit_type), in the
    reference's vocabulary: ``last_visit_status`` is successful, failed or
    not_found (None before the first final visit), queue positions are Unix
    seconds."""

    url: str
    visit_type: str
    last_successful: datetime | None = None
    last_visit: datetime | None = None
    last_visit_status: Literal["successful", "failed", "not_found"] | None = None
    last_scheduled: datetime | None = None
    last_snapshot: bytes | None = None
    next_visit_queue_position: int | None = None
    next_position_offset: int = 4
    successive_visits: int = 1


#: A date given as one (the wire format's), not as text or a number.
Date = Annotated[datetime, Field(strict=True)]
Method = TypeVar("Method", bound=Callable[..., Any])


def checked(method: Method) -> Method:
    """``method`` with its arguments validated as annotated (pydantic) before it
    runs: a bad one raises ListerInputError naming it."""
    validating, signature = validate_call(method), inspect.signature(method)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:  # by name: an error names the argument, not its position
            return validating(**signature.bind(*args, **kwargs).arguments)
        except ValidationError as exc:
            if exc.title != method.__qualname__:  # not an argument's
                raise
            raise ListerInputError(first_error(exc, "arguments")) from None

    return call  # type: ignore[return-value]


def parse(model: type[Model], value: Any, field: str) -> Model:
    """``value`` as ``model``, or ListerInputError naming ``field`` and the bad part."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ListerInputError(f"{field}.{first_error(exc, '')}".replace(".:", ":")) from None
