from datetime import UTC, datetime

import msgpack
import pytest

from app.domain.journal_event import InvalidEvent, event_from_dict
from app.journal_codec import UndecodableMessage, decode, encode, visit_status_value

KNOWN = frozenset({"git", "hg"})
DATE = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def valid() -> dict[str, object]:
    return visit_status_value("https://x.org/r", 3, DATE, "full", b"s" * 20, "git", None)


def test_encoded_status_decodes_to_the_same_event() -> None:
    event = event_from_dict(decode(encode(valid())), KNOWN)
    assert (event.origin, event.visit, event.date, event.status) == (
        "https://x.org/r",
        3,
        DATE,
        "full",
    )
    assert event.snapshot == b"s" * 20


def test_dates_travel_as_msgpack_timestamp_extension() -> None:
    raw = msgpack.unpackb(encode(valid()), raw=False, timestamp=0)
    assert raw["date"] == msgpack.Timestamp.from_datetime(DATE)


def test_bytes_that_are_not_msgpack_are_refused() -> None:
    with pytest.raises(UndecodableMessage, match="value: not msgpack"):
        decode(b"\xc1\xc1 not msgpack")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"origin": None}, "origin"),
        ({"visit": "3"}, "visit"),
        ({"date": "2026-01-01"}, "date"),
        ({"status": "exploded"}, "status"),
        ({"type": "cvs"}, "type"),
        ({"snapshot": b"short"}, "snapshot"),
        ({"metadata": [1]}, "metadata"),
    ],
)
def test_ill_typed_field_is_named_in_the_error(change: dict[str, object], field: str) -> None:
    raw = {**valid(), **change}
    with pytest.raises(InvalidEvent, match=f"^{field}:"):
        event_from_dict(raw, KNOWN)


def test_missing_field_is_named() -> None:
    raw = valid()
    del raw["status"]
    with pytest.raises(InvalidEvent, match="status: missing"):
        event_from_dict(raw, KNOWN)


def test_unknown_visit_type_lists_the_known_ones() -> None:
    with pytest.raises(InvalidEvent, match="known: git, hg"):
        event_from_dict({**valid(), "type": "bzr"}, KNOWN)
