"""Visit types as operators manage them: add, list, change (``revisit visit-type``).

A visit type names a loader, the Dramatiq queues ``visit.<name>.*`` and a
Redis hash tag, so its name is restricted to what all three accept.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.db import visit_types as db
from app.db.connection import DictConnection
from app.domain.lanes import MAX_TIME_LIMIT_S
from app.inputs.rules import StoredText

#: Longest interval accepted between two visits of one origin (10 years).
MAX_INTERVAL_S = 10 * 365 * 86400.0
#: Shortest ``min_interval`` accepted (1 hour): below it, every origin of the
#: visit type may be sent again as soon as its visit ends, flooding the
#: workers and the forges; a failed visit's quick retries are ``retry_delay``'s.
MIN_INTERVAL_S = 3600.0


class VisitTypeError(ValueError):
    """A visit type operation that cannot be done; the text names the field."""


class VisitTypeChange(BaseModel):
    """Settings of a visit type; None leaves a setting as it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    description: StoredText | None = Field(default=None, max_length=200)
    min_interval_s: float | None = Field(
        default=None, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S, allow_inf_nan=False
    )
    max_interval_s: float | None = Field(default=None, gt=0, le=MAX_INTERVAL_S, allow_inf_nan=False)
    max_queue_length: int | None = Field(default=None, ge=1, le=1_000_000)
    time_limit_s: float | None = Field(default=None, gt=0, le=MAX_TIME_LIMIT_S, allow_inf_nan=False)
    num_retries: int | None = Field(default=None, ge=0, le=20)
    retry_delay_s: float | None = Field(default=None, gt=0, le=MAX_INTERVAL_S, allow_inf_nan=False)
    #: Entry point (``revisit.loaders``) of its loader; None: the one named like it.
    loader: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_-]{0,39}$")

    @model_validator(mode="after")
    def _ordered(self) -> VisitTypeChange:
        low, high = self.min_interval_s, self.max_interval_s
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_interval_s {low:g} is above max_interval_s {high:g}")
        return self


def add_visit_type(conn: DictConnection, change: VisitTypeChange) -> None:
    """Create a visit type with the project's default policies, and the columns'
    defaults for what ``change`` leaves unset; refuse a known name."""
    low = change.min_interval_s or 12 * 3600.0
    high = change.max_interval_s or 64 * 86400.0
    if low > high:
        raise VisitTypeError(f"min_interval_s: {low:g} is above max_interval_s {high:g}")
    params = {
        "name": change.name,
        "description": change.description or "",
        "min_interval_s": low,
        "max_interval_s": high,
        "max_queue_length": change.max_queue_length or 1000,
        "time_limit_s": change.time_limit_s or 4 * 3600.0,
        "num_retries": 3 if change.num_retries is None else change.num_retries,
        "retry_delay_s": change.retry_delay_s or 30.0,
        "loader": change.loader,
    }
    if not db.insert_visit_type(conn, params):
        raise VisitTypeError(f"name: visit type {change.name!r} already exists")


def set_visit_type(conn: DictConnection, change: VisitTypeChange) -> None:
    """Change the given settings of a visit type, keeping min <= max interval."""
    with conn.transaction():
        row = db.update_visit_type(conn, change.model_dump())
        if row is None:
            raise VisitTypeError(f"name: no visit type {change.name!r}")
        if row["min_interval_s"] > row["max_interval_s"]:
            raise VisitTypeError(
                f"min_interval_s: {float(row['min_interval_s']):g} would be above "
                f"max_interval_s {float(row['max_interval_s']):g}"
            )
