"""The reference archive's journal encoding (msgpack, Timestamp extension for dates)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgpack


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
