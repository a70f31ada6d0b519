from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.db.history_codec import decode_history, encode_history
from app.domain.visit_history import FinalVisit, Tally, VisitHistory

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


@given(TALLIES, st.lists(VISITS, max_size=10))
def test_a_stored_history_reads_back_identical(base: Tally, recent: list[FinalVisit]) -> None:
    history = VisitHistory(base, tuple(recent))
    assert decode_history(encode_history(history)) == history


def test_a_full_history_of_eight_visits_stays_small() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    recent = tuple(
        FinalVisit(v, t0 + timedelta(days=v), "full", bytes([v]) * 20, 12.5) for v in range(8)
    )
    assert len(encode_history(VisitHistory(Tally(), recent))) < 400
