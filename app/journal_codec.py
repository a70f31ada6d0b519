"""The reference archive's journal encoding (msgpack, Timestamp extension for dates).

Two decoders of an origin_visit_status value: ``fast_event`` (msgspec, which
checks the types while it decodes, in a fraction of the time) takes the messages it can vouch
for, and ``decode`` + ``event_from_dict`` takes the rest, so a rejected
message gets the same reason whichever path saw it first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgpack
import msgspec

from app.domain.journal_event import MAX_VISIT, SNAPSHOT_ID_LENGTH, VisitStatusEvent
from app.domain.visit_status import ALL_STATUSES


class UndecodableMessage(ValueError):
    """Bytes that are not a msgpack value."""


def decode(payload: bytes | None) -> Any:
    """Decode one journal value; dates come back as aware UTC datetimes."""
    if payload is None:
        raise UndecodableMessage("value: empty (tombstone)")
    try:
        return msgpack.unpackb(payload, raw=False, timestamp=3, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise UndecodableMessage(f"value: not msgpack ({type(exc).__name__}: {exc})") from exc


def encode(value: dict[str, Any]) -> bytes:
    """Encode one journal value as the archive does."""
    packed: bytes = msgpack.packb(value, use_bin_type=True, datetime=True)
    return packed


def visit_status_value(
    origin: str,
    visit: int,
    date: datetime,
    status: str,
    snapshot: bytes | None,
    visit_type: str,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """An origin_visit_status record in the archive's field names."""
    return {
        "origin": origin,
        "visit": visit,
        "date": date,
        "status": status,
        "snapshot": snapshot,
        "type": visit_type,
        "metadata": metadata,
    }


def visit_status_key(origin: str, visit: int, date: datetime) -> bytes:
    """The archive's key of an origin_visit_status record."""
    return encode({"origin": origin, "visit": visit, "date": date})


class _StatusRecord(msgspec.Struct):
    """The fields of an origin_visit_status value that msgspec checks while decoding."""

    origin: str
    visit: Annotated[int, msgspec.Meta(ge=0, le=MAX_VISIT)]
    # Any, not datetime: msgspec would also read an RFC 3339 string as a date,
    # which the archive never sends and the exact path refuses.
    date: Any
    status: str
    type: str
    snapshot: (
        Annotated[bytes, msgspec.Meta(min_length=SNAPSHOT_ID_LENGTH, max_length=SNAPSHOT_ID_LENGTH)]
        | None
    ) = None
    metadata: Any = None


def _ext(code: int, data: memoryview) -> msgpack.ExtType:
    # Extension values inside metadata come back as msgpack's own ExtType, as
    # the exact path gives them (Timestamps are dates on both paths).
    return msgpack.ExtType(code, bytes(data))


_DECODER = msgspec.msgpack.Decoder(_StatusRecord, ext_hook=_ext)


def fast_event(payload: bytes | None, known_visit_types: frozenset[str]) -> VisitStatusEvent | None:
    """The event of a well-formed value, or None when this path cannot vouch for it.

    None is not a rejection: the caller decodes the value again with ``decode``
    and ``event_from_dict``, which name the field at fault. Whatever this
    accepts, that path accepts too, as the same event (a property test).
    """
    if payload is None:
        return None
    try:
        record = _DECODER.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    date = record.date
    metadata = record.metadata
    if (
        not record.origin
        or "\x00" in record.origin
        or not isinstance(date, datetime)
        or date.tzinfo is None
        or record.status not in ALL_STATUSES
        or record.type not in known_visit_types
        or not (metadata is None or isinstance(metadata, dict))
    ):
        return None
    return VisitStatusEvent(
        record.origin, record.type, record.visit, date, record.status, record.snapshot, metadata
    )
