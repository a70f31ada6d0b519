"""A decoded origin_visit_status journal message, and its validation."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import msgspec

from app.domain.visit_status import ALL_STATUSES, FINAL_STATUSES

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


def event_from_dict(raw: Any, known_visit_types: frozenset[str]) -> VisitStatusEvent:
    """Validate a decoded journal value; raise InvalidEvent naming the bad field."""
    if not isinstance(raw, dict):
        raise InvalidEvent(f"value: expected a map, got {type(raw).__name__}")
    origin = _field(raw, "origin", str)
    if not origin:
        raise InvalidEvent("origin: empty")
    if "\x00" in origin:
        raise InvalidEvent("origin: contains a NUL character")
    visit = _field(raw, "visit", int)
    if isinstance(visit, bool) or not 0 <= visit <= MAX_VISIT:
        raise InvalidEvent(f"visit: expected an integer in [0, 2^63), got {visit!r}")
    date = _field(raw, "date", datetime)
    if date.tzinfo is None:
        raise InvalidEvent("date: naive datetime, expected UTC")
    status = _field(raw, "status", str)
    if status not in ALL_STATUSES:
        raise InvalidEvent(f"status: unknown status {status!r}")
    visit_type = _field(raw, "type", str)
    if visit_type not in known_visit_types:
        known = ", ".join(sorted(known_visit_types))
        raise InvalidEvent(f"type: unknown visit type {visit_type!r} (known: {known})")
    snapshot = raw.get("snapshot")
    if snapshot is not None and (
        not isinstance(snapshot, bytes) or len(snapshot) != SNAPSHOT_ID_LENGTH
    ):
        raise InvalidEvent("snapshot: expected 20 bytes or nil")
    metadata = raw.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidEvent("metadata: expected a map or nil")
    return VisitStatusEvent(origin, visit_type, visit, date, status, snapshot, metadata)


def _field(raw: dict[Any, Any], name: str, kind: type[Any]) -> Any:
    if name not in raw:
        raise InvalidEvent(f"{name}: missing")
    value = raw[name]
    if not isinstance(value, kind):
        raise InvalidEvent(f"{name}: expected {kind.__name__}, got {type(value).__name__}")
    return value
