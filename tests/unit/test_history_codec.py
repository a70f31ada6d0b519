from datetime import UTC, datetime, timedelta

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from app.db.history_codec import decode_history, encode_history
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
