"""A decoded origin_visit_status journal message (decoded by ``app.kafka.codec``)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import msgspec

from app.domain.visit_status import FINAL_STATUSES

SNAPSHOT_ID_LENGTH = 20
MAX_VISIT = 2**63 - 1  # a PostgreSQL bigint


class InvalidEvent(ValueError):
    """A journal message that cannot be applied; the text names the field."""


class VisitStatusEvent(msgspec.Struct, frozen=True, gc=False):
    """One origin_visit_status record as the archive publishes it.

    A frozen msgspec Struct, not a frozen dataclass: the journal builds one per
    message, and a frozen dataclass sets each field with ``object.__setattr__``,
    many times slower. It compares, hashes and prints as a dataclass would
    (``msgspec.structs`` has ``fields``, ``astuple`` and ``replace`` for it).
    Not tracked by the garbage collector: nothing it holds can refer back to it
    (its metadata is a decoded map).
    """

    origin: str
    visit_type: str
    visit: int
    date: datetime
    status: str
    snapshot: bytes | None
    metadata: dict[str, Any] | None = None

    @property
    def is_final(self) -> bool:
        """Whether this status ends the visit (and so moves the schedule)."""
        return self.status in FINAL_STATUSES

    @property
    def duration_s(self) -> float | None:
        """Visit duration reported by the loader in ``metadata``, if any: a finite,
        non-negative number of seconds. Anything else (negative, NaN, infinite,
        not a number) is no duration: metadata is the loader's own, so the
        status stands, and a value that does not order (NaN) or ties with "no
        duration" (-1) would make the kept status depend on arrival order."""
        if not self.metadata:
            return None
        value = self.metadata.get("duration_s")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
