"""The reference archive's journal encoding (msgpack, Timestamp extension for dates).

One decoder of an origin_visit_status value, ``decode_event``: msgspec reads
and type-checks the map in one pass (the bounds of ``visit`` and ``snapshot``
are ``msgspec.Meta`` constraints), then the rules of the values: known
statuses, a URL and a visit type name as listings take them (a visit type
revisit does not know yet is the caller's to create, as the reference
accepts any). A refused value raises ``InvalidEvent``
whose text starts with the field at fault (``field: what is wrong``), the
reason a dead letter carries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgpack
import msgspec

from app.domain.journal_event import (
    MAX_VISIT,
    SNAPSHOT_ID_LENGTH,
    InvalidEvent,
    VisitStatusEvent,
)
from app.domain.visit_status import ALL_STATUSES
from app.inputs.decode_errors import fault
from app.inputs.rules import check_url, check_visit_type, without_userinfo


class UndecodableMessage(InvalidEvent):
    """Bytes that are not a msgpack value."""


def _ext(code: int, data: memoryview) -> msgpack.ExtType:
    # Extension values inside metadata come back as msgpack's own ExtType, the
    # type ``encode`` writes them from (Timestamps are dates).
    return msgpack.ExtType(code, bytes(data))


_ANY = msgspec.msgpack.Decoder(ext_hook=_ext)


def decode(payload: bytes | None) -> Any:
    """Decode one journal value as it is, unchecked (dates as aware UTC datetimes)."""
    if payload is None:
        raise UndecodableMessage("value: empty (tombstone)")
    try:
        return _ANY.decode(payload)
    except msgspec.DecodeError as exc:
        raise UndecodableMessage(f"value: not msgpack ({exc})") from None


def encode(value: Any) -> bytes:
    """Encode one journal value as the archive does."""
    packed: bytes = msgpack.packb(value, use_bin_type=True, datetime=True)
    return packed


def without_credentials(payload: bytes | None) -> bytes | None:
    """A journal key or value with the user name and password of every URL in it
    replaced by ``***`` (``without_userinfo``): what a dead letter keeps of a
    refused message. A msgpack value is redacted string by string and encoded
    again, so it still decodes; other bytes are redacted as they are. A
    message with no credentials is returned unchanged."""
    if payload is None:
        return None
    text = payload.decode("utf-8", "surrogateescape")
    if without_userinfo(text) == text:
        return payload
    try:
        value = decode(payload)
    except UndecodableMessage:
        return without_userinfo(text).encode("utf-8", "surrogateescape")
    return encode(_redacted(value))


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return without_userinfo(value)
    if isinstance(value, dict):
        return {_redacted(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


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
    """An origin_visit_status value as it travels (other fields are ignored)."""

    origin: str
    visit: Annotated[int, msgspec.Meta(ge=0, le=MAX_VISIT)]
    # Any, not datetime: msgspec would also read an RFC 3339 string as a date,
    # which the archive never sends; a Timestamp decodes as an aware UTC date.
    date: Any
    status: str
    type: str
    snapshot: (
        Annotated[bytes, msgspec.Meta(min_length=SNAPSHOT_ID_LENGTH, max_length=SNAPSHOT_ID_LENGTH)]
        | None
    ) = None
    metadata: dict[Any, Any] | None = None


_DECODER = msgspec.msgpack.Decoder(_StatusRecord, ext_hook=_ext)


def decode_event(payload: bytes | None) -> VisitStatusEvent:
    """The event of one journal value; InvalidEvent naming the field when it cannot apply."""
    if payload is None:
        raise UndecodableMessage("value: empty (tombstone)")
    try:
        record = _DECODER.decode(payload)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(_reason(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise UndecodableMessage(f"value: not msgpack ({exc})") from None
    if not record.origin:
        raise InvalidEvent("origin: empty")
    try:
        check_url(record.origin)  # the rules of listings and requests
    except ValueError as exc:
        raise InvalidEvent(f"origin: {exc}") from None
    if not isinstance(record.date, datetime):
        raise InvalidEvent(f"date: expected datetime, got {type(record.date).__name__}")
    if record.status not in ALL_STATUSES:
        raise InvalidEvent(f"status: unknown status {record.status!r}")
    try:
        check_visit_type(record.type)
    except ValueError as exc:
        raise InvalidEvent(f"type: {exc}") from None
    return VisitStatusEvent(
        record.origin,
        record.type,
        record.visit,
        record.date,
        record.status,
        record.snapshot,
        record.metadata,
    )


#: What a field bound by a constraint must hold, said as the archive's terms.
_EXPECTED = {
    "visit": "expected an integer in [0, 2^63)",
    "snapshot": f"expected {SNAPSHOT_ID_LENGTH} bytes or nil",
    "metadata": "expected a map or nil",
}


def _reason(error: str) -> str:
    """``field: what is wrong`` of msgspec's validation error text."""
    kind, field, text = fault(error)
    if field is None:
        return "value: " + _plain(text.replace("`object`", "a map"))
    if kind == "missing":
        return f"{field}: missing"
    return f"{field}: {_EXPECTED.get(field) or _plain(text)}"


def _plain(text: str) -> str:
    return (text[:1].lower() + text[1:]).replace("`", "")
