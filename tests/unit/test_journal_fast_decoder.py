"""The fast decoder (msgspec) never disagrees with the exact one (msgpack + validation)."""

from datetime import UTC, datetime
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.journal_event import InvalidEvent, VisitStatusEvent, event_from_dict
from app.journal_codec import UndecodableMessage, decode, encode, fast_event

KNOWN = frozenset({"git", "hg"})
DATE = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)

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


def exact(payload: bytes | None) -> VisitStatusEvent | None:
    try:
        return event_from_dict(decode(payload), KNOWN)
    except (UndecodableMessage, InvalidEvent):
        return None


@settings(max_examples=400)
@given(values())
def test_fast_decoder_accepts_only_what_the_exact_one_accepts_as_the_same_event(
    value: dict[str, Any],
) -> None:
    payload = encode(value)
    fast = fast_event(payload, KNOWN)
    assert fast is None or fast == exact(payload)


def test_fast_decoder_takes_a_well_formed_status() -> None:
    payload = encode(
        {
            "origin": "https://x.org/r",
            "visit": 3,
            "date": DATE,
            "status": "full",
            "snapshot": b"s" * 20,
            "type": "git",
            "metadata": {"duration_s": 1.5, "tag": msgpack.ExtType(5, b"x")},
        }
    )
    event = fast_event(payload, KNOWN)
    assert event is not None and event == exact(payload)
    assert event.duration_s == 1.5


@given(st.binary(max_size=40))
def test_fast_decoder_leaves_arbitrary_bytes_to_the_exact_one(payload: bytes) -> None:
    fast = fast_event(payload, KNOWN)
    assert fast is None or fast == exact(payload)
