"""The records a journal batch builds by the thousand (``Tally``, ``FinalVisit``,
``OriginStats``, ``MirrorRow``, ``VisitStatusEvent``, ``ChangeObservations``,
``Placement``, ``VisitHistory``, ``Folded``) are frozen msgspec Structs, where
they were frozen dataclasses or a NamedTuple: they must still be immutable,
compare and hash by value, print as before, and store the same history bytes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from app.db.history_codec import encode_history
from app.domain.change_rate import ChangeObservations
from app.domain.journal_event import VisitStatusEvent
from app.domain.placement import MirrorRow, Placement
from app.domain.visit_history import FinalVisit, Folded, Tally, VisitHistory, tally_of, with_fold
from app.domain.visit_stats import OriginStats

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BASE = Tally(4, 3, 2, 1, 0, 2, "full", 9, T0, T0, T0, b"s" * 20, 12.5, 1.0, 3600.0, 0.0, 0.0)
RECENT = (
    FinalVisit(10, T0.replace(day=2), "failed", None, None),
    FinalVisit(11, T0.replace(day=3), "full", b"a" * 20, 30.0),
)
#: encode_history of BASE + RECENT and its fold, as the frozen dataclasses stored it.
STORED_BEFORE = bytes.fromhex(
    "9502dc0011040302010002a466756c6c09d6ff6955b900d6ff6955b900d6ff6955b900c414737373737373"
    "7373737373737373737373737373cb4029000000000000cb3ff0000000000000cb40ac200000000000000092"
    "950ad6ff69570a80a66661696c6564c0c0950bd6ff69585c00a466756c6cc414616161616161616161616161"
    "6161616161616161cb403e00000000000009dc0011020402020001a466756c6c0bd6ff69585c00d6ff69585c"
    "00d6ff69585c00c4146161616161616161616161616161616161616161cb403e000000000000cb3ffe666666"
    "666666cb41057d40000000000000"
)
ROW = MirrorRow(1, "git", T0, "full", T0, None, T0, None, False, True)
EVENT = VisitStatusEvent("u", "git", 3, T0, "full", b"a" * 20, {"duration_s": 1.5})


def test_a_history_is_stored_as_the_same_bytes_as_before() -> None:
    history = VisitHistory(BASE, RECENT)
    assert encode_history(with_fold(history, tally_of(history, 9)[0], 9)) == STORED_BEFORE


def test_the_records_print_as_the_dataclasses_did() -> None:
    assert repr(RECENT[0]) == (
        "FinalVisit(visit=10, date=datetime.datetime(2026, 1, 2, 0, 0, "
        "tzinfo=datetime.timezone.utc), status='failed', snapshot=None, duration_s=None)"
    )
    assert repr(Tally()).startswith("Tally(next_position_offset=")


@pytest.mark.parametrize(
    ("record", "name"),
    [
        (BASE, "eventful_visits"),
        (RECENT[0], "status"),
        (OriginStats("u", "git"), "url"),
        (ROW, "enabled"),
        (EVENT, "status"),
        (ChangeObservations(), "changed"),
        (Placement(1, "pool", 2.0, "up_to_date", 2.0), "score"),
        (VisitHistory(), "recent"),
        (Folded(9, BASE), "tally"),
    ],
)
def test_a_record_cannot_be_changed_once_built(record: object, name: str) -> None:
    with pytest.raises(AttributeError):
        setattr(record, name, None)


@given(st.integers(0, 3), st.integers(0, 3), st.sampled_from([None, "full", "failed"]))
def test_tallies_are_equal_and_hash_alike_exactly_when_their_values_are(
    eventful: int, failed: int, status: str | None
) -> None:
    a = Tally(eventful_visits=eventful, failed_visits=failed, last_visit_status=status)
    b = Tally(eventful_visits=1, failed_visits=1, last_visit_status="full")
    assert (a == b) == (structs.astuple(a) == structs.astuple(b))
    assert a == structs.replace(a) and hash(a) == hash(structs.replace(a))
    assert a != structs.astuple(a)  # a record is not the tuple of its values


def test_origin_stats_compare_by_value_including_their_tally_and_history() -> None:
    stats = OriginStats("u", "git", BASE, VisitHistory(BASE, RECENT), T0)
    assert stats == OriginStats("u", "git", BASE, VisitHistory(BASE, RECENT), T0)
    assert stats != structs.replace(stats, tally=Tally())
    assert OriginStats("u", "git").tally == Tally()


def test_events_placements_and_observations_print_as_the_dataclasses_did() -> None:
    assert repr(EVENT) == (
        "VisitStatusEvent(origin='u', visit_type='git', visit=3, date=datetime.datetime(2026, "
        "1, 1, 0, 0, tzinfo=datetime.timezone.utc), status='full', "
        "snapshot=b'aaaaaaaaaaaaaaaaaaaa', metadata={'duration_s': 1.5})"
    )
    assert repr(ChangeObservations(1.0, 2.0)) == (
        "ChangeObservations(changed=1.0, changed_s=2.0, unchanged=0.0, unchanged_s=0.0)"
    )
    assert repr(Placement(1, "pool", 2.0, "up_to_date", 2.0, 7)) == (
        "Placement(id=1, where='pool', score=2.0, pool='up_to_date', pool_score=2.0, version=7)"
    )


def test_events_compare_by_value_and_one_with_metadata_does_not_hash() -> None:
    assert structs.replace(EVENT, metadata={"duration_s": 1.5}) == EVENT
    assert structs.replace(EVENT, visit=4) != EVENT
    plain = structs.replace(EVENT, metadata=None)
    assert hash(plain) == hash(structs.replace(plain))
    with pytest.raises(TypeError):
        hash(EVENT)  # a map does not hash, as with the dataclass


def test_a_history_compares_hashes_and_prints_without_the_fold_it_keeps() -> None:
    history = VisitHistory(BASE, RECENT)
    kept = with_fold(history, tally_of(history, 9)[0], 9)
    assert kept.folded == Folded(9, tally_of(history, 9)[0])
    assert kept == history and hash(kept) == hash(history)
    assert kept != VisitHistory(BASE, RECENT[:1])
    assert history != (BASE, RECENT)  # a history is not the tuple of its values
    assert repr(kept) == repr(history) == f"VisitHistory(base={BASE!r}, recent={RECENT!r})"
    assert VisitHistory() == VisitHistory(Tally(), ()) and VisitHistory().folded is None
