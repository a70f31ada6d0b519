"""Visit types as operators manage them: add, list, change (``revisit visit-type``),
and as listings create them.

A visit type names a loader, the Dramatiq queues ``visit.<name>.*`` and a
Redis hash tag, so its name is restricted to what all three accept
(``app.inputs.rules.check_visit_type``). A listing that reports a visit type
nobody added creates it with the defaults, paused (``enabled`` false): its
origins are recorded and counted, but no visit is sent until an operator
enables it, once workers with its loader run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.db import visit_types as db
from app.db.connection import DictConnection
from app.db.listings import known_visit_types
from app.domain.lanes import MAX_TIME_LIMIT_S
from app.inputs.rules import StoredText, VisitTypeName

log = logging.getLogger("revisit.visit_types")

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

    name: VisitTypeName
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
    #: Whether the scheduler sends its visits (None: unchanged; an added one is).
    enabled: bool | None = None

    @model_validator(mode="after")
    def _ordered(self) -> VisitTypeChange:
        low, high = self.min_interval_s, self.max_interval_s
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_interval_s {low:g} is above max_interval_s {high:g}")
        return self


def _row(change: VisitTypeChange) -> dict[str, Any]:
    """The visit_types row of a new visit type: ``change``, and the defaults for
    what it leaves unset."""
    low = change.min_interval_s or 12 * 3600.0
    high = change.max_interval_s or 64 * 86400.0
    if low > high:
        raise VisitTypeError(f"min_interval_s: {low:g} is above max_interval_s {high:g}")
    return {
        "name": change.name,
        "description": change.description or "",
        "min_interval_s": low,
        "max_interval_s": high,
        "max_queue_length": change.max_queue_length or 1000,
        "time_limit_s": change.time_limit_s or 4 * 3600.0,
        "num_retries": 3 if change.num_retries is None else change.num_retries,
        "retry_delay_s": change.retry_delay_s or 30.0,
        "loader": change.loader,
        "enabled": True if change.enabled is None else change.enabled,
    }


def add_visit_type(conn: DictConnection, change: VisitTypeChange) -> None:
    """Create a visit type with the project's default policies, and the columns'
    defaults for what ``change`` leaves unset; refuse a known name."""
    if not db.insert_visit_type(conn, _row(change)):
        raise VisitTypeError(
            f"name: visit type {change.name!r} already exists (revisit visit-type set "
            "changes it; --enable lets the scheduler send its visits)"
        )


def add_listed_visit_types(conn: DictConnection, names: Iterable[str], now: datetime) -> list[str]:
    """Create, paused and with the defaults, the visit types among ``names`` (valid
    names) that do not exist yet, in the caller's transaction; return them.

    A listing is never refused for its visit type: the archive's listers report
    types (maven, npm, tarball-directory...) before anyone has a loader for them.
    """
    missing = sorted(set(names) - known_visit_types(conn))
    created = []
    for name in missing:
        change = VisitTypeChange(
            name=name,
            description=f"created by a listing on {now:%Y-%m-%d}",
            enabled=False,
        )
        if db.insert_visit_type(conn, _row(change)):
            created.append(name)
            log.warning(
                "visit type %s created by a listing, paused: its origins are recorded but not "
                "visited until an operator enables it (revisit visit-type set %s --enable)",
                name,
                name,
            )
    return created


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
