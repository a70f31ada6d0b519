from datetime import UTC, datetime
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.journal_event import InvalidEvent
from app.kafka.codec import (
    UndecodableMessage,
    decode,
    decode_event,
    encode,
    visit_status_value,
    without_credentials,
)
from monitoring.process import DEAD_LETTER_REASONS

DATE = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def valid() -> dict[str, Any]:
    return visit_status_value("https://x.org/r", 3, DATE, "full", b"s" * 20, "git", None)


def test_a_visit_type_revisit_does_not_know_yet_decodes_for_the_caller_to_create() -> None:
    assert decode_event(encode({**valid(), "type": "tarball-directory"})).visit_type == (
        "tarball-directory"
    )


def test_encoded_status_decodes_to_the_same_event() -> None:
    event = decode_event(encode(valid()))
    assert (event.origin, event.visit_type, event.visit, event.date, event.status) == (
        "https://x.org/r",
        "git",
        3,
        DATE,
        "full",
    )
    assert event.snapshot == b"s" * 20


def test_metadata_keeps_its_durations_and_extension_values() -> None:
    metadata = {"duration_s": 1.5, "tag": msgpack.ExtType(5, b"x"), "at": DATE}
    event = decode_event(encode({**valid(), "metadata": metadata}))
    assert event.metadata == metadata
    assert event.duration_s == 1.5


def test_dates_travel_as_msgpack_timestamp_extension() -> None:
    raw = msgpack.unpackb(encode(valid()), raw=False, timestamp=0)
    assert raw["date"] == msgpack.Timestamp.from_datetime(DATE)


def test_a_value_decodes_unchecked_with_its_dates_aware() -> None:
    assert decode(encode({**valid(), "visit": "x"})) == {**valid(), "visit": "x"}


@pytest.mark.parametrize("payload", [b"\xc1\xc1 not msgpack", b"\x81", None])
def test_bytes_that_are_not_a_msgpack_value_are_refused(payload: bytes | None) -> None:
    with pytest.raises(UndecodableMessage, match=r"^value: "):
        decode_event(payload)
    with pytest.raises(UndecodableMessage, match=r"^value: "):
        decode(payload)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"origin": None}, "origin: expected str, got None"),
        ({"origin": ""}, "origin: empty"),
        ({"origin": "a\x00b"}, "origin: URL holds a forbidden character '\\x00' at 1"),
        ({"visit": "3"}, "visit: expected an integer in [0, 2^63)"),
        ({"visit": -1}, "visit: expected an integer in [0, 2^63)"),
        ({"visit": 2**63}, "visit: expected an integer in [0, 2^63)"),
        ({"visit": True}, "visit: expected an integer in [0, 2^63)"),
        ({"date": "2026-01-01"}, "date: expected datetime, got str"),
        ({"status": "exploded"}, "status: unknown status 'exploded'"),
        (
            {"type": "svn export"},
            "type: 'svn export' cannot name a visit type: 1 to 64 lower case letters, digits, "
            "'-', '_' or '.', starting with a letter or digit (it names queues and Redis keys)",
        ),
        ({"type": 3}, "type: expected str, got int"),
        ({"snapshot": b"short"}, "snapshot: expected 20 bytes or nil"),
        ({"snapshot": "s" * 20}, "snapshot: expected 20 bytes or nil"),
        ({"metadata": [1]}, "metadata: expected a map or nil"),
    ],
)
def test_ill_typed_field_is_named_in_the_error(change: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        decode_event(encode({**valid(), **change}))
    assert str(info.value) == reason


def test_missing_field_is_named() -> None:
    raw = valid()
    del raw["status"]
    with pytest.raises(InvalidEvent, match=r"^status: missing$"):
        decode_event(encode(raw))


@pytest.mark.parametrize("value", [[1], 5, "x"])
def test_a_value_that_is_not_a_map_is_refused_as_such(value: object) -> None:
    payload: bytes = msgpack.packb(value)
    with pytest.raises(InvalidEvent, match=r"^value: expected a map, got "):
        decode_event(payload)


def test_fields_the_scheduler_does_not_read_are_ignored() -> None:
    assert decode_event(encode({**valid(), "extra": [1]})).visit == 3


ODD = st.none() | st.booleans() | st.floats(allow_nan=False) | st.binary(max_size=3)
SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5)
METADATA = st.dictionaries(st.text(max_size=8), SCALARS | st.datetimes(timezones=st.just(UTC)))
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "origin": st.sampled_from(["https://x.org/r", "", "a\x00b"]) | st.text(max_size=5) | ODD,
    "visit": st.integers(-1, 2**64 - 1) | st.sampled_from([0, 2**63 - 1, 2**63]) | ODD,
    "date": st.datetimes(timezones=st.just(UTC)) | st.just("2026-01-01T00:00:00Z") | ODD,
    "status": st.sampled_from(["created", "ongoing", "full", "partial", "failed", "not_found"])
    | st.text(max_size=5)
    | ODD,
    "type": st.sampled_from(["git", "hg", "svn"]) | ODD,
    "snapshot": st.none() | st.binary(min_size=19, max_size=21) | st.text(max_size=20),
    "metadata": st.none() | METADATA | st.lists(SCALARS, max_size=2) | st.text(max_size=3),
}


@st.composite
def values(draw: st.DrawFn) -> dict[str, Any]:
    value = {name: draw(strategy) for name, strategy in FIELDS.items()}
    dropped = draw(st.sets(st.sampled_from(sorted(FIELDS))))
    return {k: v for k, v in value.items() if k not in dropped}


def decoded_or_reason(payload: bytes) -> str | None:
    try:
        decode_event(payload)
    except InvalidEvent as exc:
        return str(exc)
    return None


@settings(max_examples=400)
@given(values())
def test_any_value_is_decoded_or_refused_naming_a_field(value: dict[str, Any]) -> None:
    reason = decoded_or_reason(encode(value))
    assert reason is None or reason.split(":")[0] in DEAD_LETTER_REASONS


@given(st.binary(max_size=40))
def test_any_bytes_are_decoded_or_refused_naming_a_field(payload: bytes) -> None:
    reason = decoded_or_reason(payload)
    assert reason is None or reason.split(":")[0] in DEAD_LETTER_REASONS


def test_a_dead_letter_keeps_no_credentials_and_still_decodes_when_it_did() -> None:
    value = valid() | {"origin": "https://u:pw@x.org/r", "metadata": {"from": ["git://a@b/c"]}}

    redacted = decode(without_credentials(encode(value)))

    assert redacted == value | {
        "origin": "https://***@x.org/r",
        "metadata": {"from": ["git://***@b/c"]},
    }
    assert without_credentials(b"\xc1 https://u:pw@x.org/r") == b"\xc1 https://***@x.org/r"
    assert without_credentials(encode(valid())) == encode(valid())
    assert without_credentials(None) is None
