from datetime import UTC, datetime, timedelta, timezone

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from app.db.history_codec import _tally_list, decode_history, encode_history
from app.domain.visit_history import FinalVisit, Folded, Tally, VisitHistory, tally_of, with_fold

DATES = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
SNAPSHOTS = st.none() | st.binary(min_size=20, max_size=20)
DURATIONS = st.none() | st.floats(min_value=0, max_value=1e6)
STATUSES = st.sampled_from(["full", "partial", "failed", "not_found"])

VISITS = st.builds(FinalVisit, st.integers(0, 2**63 - 1), DATES, STATUSES, SNAPSHOTS, DURATIONS)
TALLIES = st.builds(
    Tally,
    st.integers(0, 10),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 100),
    st.integers(0, 100),
    st.none() | STATUSES,
    st.none() | st.integers(0, 2**63 - 1),
    st.none() | DATES,
    st.none() | DATES,
    st.none() | DATES,
    SNAPSHOTS,
    DURATIONS,
)


@given(TALLIES, st.lists(VISITS, max_size=10), st.none() | st.tuples(st.integers(0, 10), TALLIES))
def test_a_stored_history_reads_back_identical(
    base: Tally, recent: list[FinalVisit], folded: tuple[int, Tally] | None
) -> None:
    kept = None if folded is None else Folded(*folded)
    history = VisitHistory(base, tuple(recent), kept)
    read = decode_history(encode_history(history))
    assert read == history
    assert read.folded == kept


def test_a_history_stored_before_it_kept_its_fold_reads_back_without_it() -> None:
    visit = FinalVisit(3, datetime(2026, 1, 1, tzinfo=UTC), "full", b"s" * 20, 1.0)
    base = [3, 0, 0, 0, 0, 0, None, None, None, None, None, None, None]
    recent = [[visit.visit, visit.date, visit.status, visit.snapshot, visit.duration_s]]
    stored = msgpack.packb([1, base, recent], use_bin_type=True, datetime=True)
    history = decode_history(stored)
    assert history == VisitHistory(Tally(next_position_offset=3), (visit,))
    assert history.folded is None


def test_a_zero_kept_as_a_float_keeps_its_sign() -> None:
    history = VisitHistory(Tally(last_duration_s=-0.0), (), Folded(3, Tally(last_duration_s=-0.0)))
    read = decode_history(encode_history(history))
    assert str(read.base.last_duration_s) == "-0.0"
    assert read.folded is not None and str(read.folded.tally.last_duration_s) == "-0.0"


def test_a_full_history_of_eight_visits_and_its_fold_stays_small() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    recent = tuple(
        FinalVisit(v, t0 + timedelta(days=v), "full", bytes([v]) * 20, 12.5) for v in range(8)
    )
    history = VisitHistory(Tally(), recent)
    assert len(encode_history(history)) < 400
    # the fold it keeps (so that a status arriving in order folds once) adds ~100 bytes
    assert len(encode_history(with_fold(history, tally_of(history, 6)[0], 6))) < 520


@pytest.mark.parametrize("version", [0, 3])
def test_a_history_of_an_unknown_format_version_is_refused_naming_it(version: int) -> None:
    stored = msgpack.packb([version, [], []])
    with pytest.raises(ValueError, match=f"^visit_history: unknown format version {version}$"):
        decode_history(stored)


@pytest.mark.parametrize(
    "stored",
    [
        b"\xc1 not msgpack",
        msgpack.packb({"version": 2}),
        msgpack.packb([2, ["x"], []]),
        msgpack.packb([2, [], [[1]]]),
        msgpack.packb([2, [], [], None, [0] * 40]),
        msgpack.packb([2, [], [], None, []]),
    ],
)
def test_a_damaged_history_is_refused_naming_the_column(stored: bytes) -> None:
    with pytest.raises(ValueError, match=r"^visit_history: "):
        decode_history(stored)


#: Dates from before 1970 to past 2106 (the three sizes of a msgpack Timestamp),
#: in UTC or at any offset.
ANY_DATES = st.datetimes(
    min_value=datetime(1900, 1, 1),
    max_value=datetime(2500, 1, 1),
    timezones=st.just(UTC)
    | st.builds(timezone, st.timedeltas(-timedelta(hours=14), timedelta(hours=14))),
)
WIDE_VISITS = st.builds(
    FinalVisit, st.integers(0, 2**63 - 1), ANY_DATES, STATUSES, SNAPSHOTS, DURATIONS
)
WIDE_TALLIES = TALLIES.flatmap(
    lambda t: st.builds(
        structs.replace,
        st.just(t),
        last_final_date=st.none() | ANY_DATES,
        change_obs_changed=st.floats(allow_nan=False),
        change_obs_unchanged_s=st.sampled_from([0.0, -0.0, 1e300, 5e-324]),
    )
)


def msgpack_encoding(history: VisitHistory) -> bytes:
    """The bytes msgpack wrote for a history before msgspec did."""
    recent = [(v.visit, v.date, v.status, v.snapshot, v.duration_s) for v in history.recent]
    folded = history.folded
    top, tally = (None, None) if folded is None else (folded.top_index, _tally_list(folded.tally))
    packed: bytes = msgpack.packb(
        [2, _tally_list(history.base), recent, top, tally], use_bin_type=True, datetime=True
    )
    return packed


@given(
    WIDE_TALLIES,
    st.lists(WIDE_VISITS, max_size=10),
    st.none() | st.tuples(st.integers(0, 2**63), WIDE_TALLIES),
)
def test_a_history_is_stored_as_the_bytes_msgpack_wrote(
    base: Tally, recent: list[FinalVisit], folded: tuple[int, Tally] | None
) -> None:
    kept = None if folded is None else Folded(*folded)
    history = VisitHistory(base, tuple(recent), kept)
    assert encode_history(history) == msgpack_encoding(history)
