import random
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_stats import OriginStats, StatsPolicy, apply_event, apply_events

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
POLICY = StatsPolicy(ladder_unit=DAY, min_interval=timedelta(hours=12), max_interval=64 * DAY)
SNAP_A = b"a" * 20
SNAP_B = b"b" * 20


def event(
    status: str, visit: int, snapshot: bytes | None = None, hours: float = 0
) -> VisitStatusEvent:
    return VisitStatusEvent(
        origin="https://example.org/r.git",
        visit_type="git",
        visit=visit,
        date=T0 + timedelta(hours=hours),
        status=status,
        snapshot=snapshot,
    )


def fresh() -> OriginStats:
    return OriginStats(url="https://example.org/r.git", visit_type="git")


def apply(stats: OriginStats, e: VisitStatusEvent) -> OriginStats:
    return apply_event(stats, e, T0, POLICY, random.Random(0))


def test_first_successful_visit_is_eventful_and_moves_index_down_by_two() -> None:
    after = apply(fresh(), event("full", 1, SNAP_A))
    assert after.eventful_visits == 1
    assert after.next_position_offset == 2
    assert after.last_snapshot == SNAP_A
    assert after.last_successful == T0


def test_uneventful_visit_moves_index_up_by_one() -> None:
    stats = apply(fresh(), event("full", 1, SNAP_A))
    after = apply(stats, event("full", 2, SNAP_A, hours=1))
    assert after.uneventful_visits == 1
    assert after.next_position_offset == stats.next_position_offset + 1


def test_next_target_is_queue_position_plus_fudged_interval() -> None:
    after = apply(fresh(), event("full", 1, SNAP_A))
    # index 2 -> 2 days, fudged by at most 10 %
    assert after.next_visit_queue_position is not None
    delta = after.next_visit_queue_position - T0
    assert 1.8 * DAY <= delta <= 2.2 * DAY


def test_failed_visit_adds_min_interval_and_three_in_a_row_disable() -> None:
    stats = fresh()
    for visit in (1, 2):
        stats = apply(stats, event("failed", visit, hours=visit))
        assert not stats.disabled_for_failures
    assert stats.failures_in_a_row == 2
    assert stats.next_visit_queue_position == T0 + 2 * POLICY.min_interval
    stats = apply(stats, event("not_found", 3, hours=3))
    assert stats.disabled_for_failures
    assert stats.failed_visits == 3


def test_success_resets_the_failure_count() -> None:
    stats = apply(fresh(), event("failed", 1))
    stats = apply(stats, event("full", 2, SNAP_A, hours=1))
    assert stats.failures_in_a_row == 0


def test_partial_visit_is_eventful_only_if_the_snapshot_changed() -> None:
    stats = apply(fresh(), event("full", 1, SNAP_A))
    same = apply(stats, event("partial", 2, SNAP_A, hours=1))
    changed = apply(stats, event("partial", 2, SNAP_B, hours=1))
    assert same.uneventful_visits == 1 and same.eventful_visits == 1
    assert changed.eventful_visits == 2


def test_created_and_ongoing_only_move_last_visit() -> None:
    stats = apply(fresh(), event("full", 1, SNAP_A))
    after = apply(stats, event("ongoing", 2, hours=5))
    assert after.last_visit == T0 + timedelta(hours=5)
    assert after.next_position_offset == stats.next_position_offset
    assert after.last_visit_status == "full"


def test_older_final_status_does_not_move_anything_back() -> None:
    stats = apply(fresh(), event("full", 2, SNAP_B, hours=2))
    assert apply(stats, event("full", 1, SNAP_A, hours=1)) == stats


STATUSES = st.sampled_from(["created", "ongoing", "full", "partial", "failed", "not_found"])
SNAPSHOTS = st.sampled_from([None, SNAP_A, SNAP_B])


@given(st.lists(st.tuples(STATUSES, SNAPSHOTS), min_size=1, max_size=12), st.randoms())
def test_replaying_a_batch_changes_nothing(
    items: list[tuple[str, bytes | None]], rnd: random.Random
) -> None:
    events = [event(s, i, snap, hours=i) for i, (s, snap) in enumerate(items)]
    once = apply_events(fresh(), events, T0, POLICY, random.Random(1))
    again = apply_events(once, events, T0, POLICY, random.Random(2))
    assert again == once


@given(st.lists(st.tuples(STATUSES, SNAPSHOTS), min_size=1, max_size=30))
def test_ladder_index_never_leaves_its_bounds(items: list[tuple[str, bytes | None]]) -> None:
    stats = fresh()
    for i, (s, snap) in enumerate(items):
        stats = apply(stats, event(s, i, snap, hours=i))
        assert 0 <= stats.next_position_offset <= POLICY.top_index
