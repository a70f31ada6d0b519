import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_stats import (
    OriginStats,
    StatsPolicy,
    StatsUpdate,
    apply_events,
    keyed_fudge,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
POLICY = StatsPolicy(ladder_unit=DAY, min_interval=timedelta(hours=12), max_interval=64 * DAY)
FUDGE = keyed_fudge()
URL = "https://example.org/r.git"
SNAP_A = b"a" * 20
SNAP_B = b"b" * 20


def event(
    status: str, visit: int, snapshot: bytes | None = None, hours: float = 0
) -> VisitStatusEvent:
    return VisitStatusEvent(
        origin=URL,
        visit_type="git",
        visit=visit,
        date=T0 + timedelta(hours=hours),
        status=status,
        snapshot=snapshot,
    )


def fresh() -> OriginStats:
    return OriginStats(url=URL, visit_type="git")


def update(
    stats: OriginStats,
    *events: VisitStatusEvent,
    position: datetime = T0,
    policy: StatsPolicy = POLICY,
) -> StatsUpdate:
    return apply_events(stats, events, position, policy, FUDGE)


def apply(stats: OriginStats, *events: VisitStatusEvent, position: datetime = T0) -> OriginStats:
    return update(stats, *events, position=position).stats


def test_first_successful_visit_is_eventful_and_moves_index_down_by_two() -> None:
    after = apply(fresh(), event("full", 1, SNAP_A))
    assert after.tally.eventful_visits == 1
    assert after.tally.next_position_offset == 2
    assert after.tally.last_snapshot == SNAP_A
    assert after.tally.last_successful == T0
    assert after.tally.last_eventful == T0


def test_uneventful_visit_moves_index_up_by_one() -> None:
    stats = apply(fresh(), event("full", 1, SNAP_A))
    after = apply(stats, event("full", 2, SNAP_A, hours=1))
    assert after.tally.uneventful_visits == 1
    assert after.tally.next_position_offset == stats.tally.next_position_offset + 1
    assert after.tally.last_eventful == T0


def test_next_target_is_queue_position_plus_fudged_interval() -> None:
    position = T0 + 3 * DAY
    after = apply(fresh(), event("full", 1, SNAP_A), position=position)
    # index 2 -> 2 days, fudged by at most 10 %
    assert after.next_visit_queue_position is not None
    delta = after.next_visit_queue_position - position
    assert 1.8 * DAY <= delta <= 2.2 * DAY
    assert after.next_visit_anchor == position


def test_the_fudge_is_a_reproducible_function_of_the_visit() -> None:
    factors = [FUDGE(URL, "git", visit) for visit in range(200)]
    assert all(0.9 <= f < 1.1 for f in factors)
    assert factors == [keyed_fudge()(URL, "git", visit) for visit in range(200)]
    assert len(set(factors)) == 200
    assert keyed_fudge(b"other")(URL, "git", 1) != factors[1]


def test_failed_visit_adds_min_interval_and_three_in_a_row_disable() -> None:
    stats = fresh()
    for visit in (1, 2):
        stats = apply(stats, event("failed", visit, hours=visit))
        assert not stats.disabled_for_failures
    assert stats.tally.failures_in_a_row == 2
    assert stats.next_visit_queue_position == T0 + POLICY.min_interval
    stats = apply(stats, event("not_found", 3, hours=3))
    assert stats.disabled_for_failures
    assert stats.tally.failed_visits == 3


def test_replaying_failures_does_not_disable_an_origin_a_listing_re_enabled() -> None:
    failures = [event("failed", v, hours=v) for v in (1, 2, 3)]
    disabled = apply(fresh(), *failures)
    relisted = structs.replace(disabled, disabled_for_failures=False)
    assert not apply(relisted, *failures).disabled_for_failures
    assert apply(relisted, event("failed", 4, hours=4)).disabled_for_failures


def test_a_late_success_between_failures_re_enables_the_origin() -> None:
    stats = apply(fresh(), *(event("failed", v, hours=v) for v in (1, 3, 4)))
    assert stats.disabled_for_failures
    stats = apply(stats, event("full", 2, SNAP_A, hours=2))
    assert stats.tally.failures_in_a_row == 2
    assert not stats.disabled_for_failures


def test_success_resets_the_failure_count() -> None:
    stats = apply(fresh(), event("failed", 1))
    stats = apply(stats, event("full", 2, SNAP_A, hours=1))
    assert stats.tally.failures_in_a_row == 0


def test_partial_visit_is_eventful_only_if_the_snapshot_changed() -> None:
    stats = apply(fresh(), event("full", 1, SNAP_A))
    same = apply(stats, event("partial", 2, SNAP_A, hours=1))
    changed = apply(stats, event("partial", 2, SNAP_B, hours=1))
    assert same.tally.uneventful_visits == 1 and same.tally.eventful_visits == 1
    assert changed.tally.eventful_visits == 2


def test_created_and_ongoing_only_move_last_visit() -> None:
    stats = apply(fresh(), event("full", 1, SNAP_A))
    result = update(stats, event("ongoing", 2, hours=5))
    assert not result.finals_changed
    assert result.stats.last_visit == T0 + timedelta(hours=5)
    assert result.stats.tally == stats.tally
    assert result.stats.next_visit_queue_position == stats.next_visit_queue_position


def test_a_late_status_is_refolded_in_visit_order() -> None:
    # 1: A, 3: A arrive first: 3 is uneventful. Then 2: B lands in between,
    # which makes 2 and 3 eventful, exactly as if all had come in order.
    late = apply(fresh(), event("full", 1, SNAP_A), event("full", 3, SNAP_A, hours=2))
    late = apply(late, event("full", 2, SNAP_B, hours=1), position=T0 + DAY)
    in_order = fresh()
    for e in (event("full", 1, SNAP_A), event("full", 2, SNAP_B, 1), event("full", 3, SNAP_A, 2)):
        in_order = apply(in_order, e)
    assert late == in_order
    assert late.tally.eventful_visits == 3
    # the newest visit did not change, so neither did the anchor of the target
    assert late.next_visit_anchor == T0


def test_a_status_older_than_the_kept_history_is_reported_and_ignored() -> None:
    policy = replace(POLICY, history_length=2)
    stats = fresh()
    for v in (2, 3, 4):
        stats = update(stats, event("full", v, SNAP_A, hours=v), policy=policy).stats
    result = update(stats, event("failed", 1, hours=1), policy=policy)
    assert result.beyond_history == 1
    assert result.stats == stats


def test_a_loader_checkpoint_and_its_final_status_count_as_one_visit() -> None:
    checkpoint = event("partial", 1, SNAP_A, hours=0)
    final = event("full", 1, SNAP_B, hours=1)
    one_way = apply(apply(fresh(), checkpoint), final)
    other_way = apply(apply(fresh(), final), checkpoint)
    assert one_way == other_way
    assert one_way.tally.last_snapshot == SNAP_B
    assert one_way.tally.eventful_visits == 1


# Property tests: a visit history is a list of final visits, each with its
# final status (maybe preceded by a checkpoint) and created/ongoing statuses.
FINAL = st.sampled_from(["full", "partial", "failed", "not_found"])
SNAPSHOT = st.sampled_from([None, SNAP_A, SNAP_B, b"c" * 20])


@st.composite
def visit_statuses(draw: st.DrawFn, max_visits: int) -> list[VisitStatusEvent]:
    count = draw(st.integers(1, max_visits))
    events = []
    for visit in range(1, count + 1):
        hours = visit * 24 + draw(st.integers(-20, 20))
        status = draw(FINAL)
        snapshot = draw(SNAPSHOT) if status in ("full", "partial") else None
        events.append(event(status, visit, snapshot, hours))
        if draw(st.booleans()):
            events.append(
                event(draw(st.sampled_from(["created", "ongoing"])), visit, None, hours - 1)
            )
        if draw(st.integers(0, 4)) == 0:
            events.append(event("partial", visit, draw(SNAPSHOT), hours - 0.5))
    return events


@st.composite
def delivered(draw: st.DrawFn, events: list[VisitStatusEvent]) -> list[list[VisitStatusEvent]]:
    """The same statuses reordered, some duplicated, cut into batches."""
    copies = events + draw(st.lists(st.sampled_from(events), max_size=len(events)))
    shuffled = draw(st.permutations(copies))
    cuts = sorted(draw(st.lists(st.integers(0, len(shuffled)), max_size=6)))
    bounds = [0, *cuts, len(shuffled)]
    return [shuffled[a:b] for a, b in itertools.pairwise(bounds)]


def clean_pass(events: list[VisitStatusEvent], policy: StatsPolicy) -> OriginStats:
    stats = fresh()
    for e in sorted(events, key=lambda e: (e.visit, e.date)):
        stats = update(stats, e, policy=policy).stats
    return stats


def deliver(batches: list[list[VisitStatusEvent]], policy: StatsPolicy) -> OriginStats:
    stats = fresh()
    for batch in batches:
        stats = update(stats, *batch, policy=policy).stats
    return stats


@given(st.data())
def test_any_order_duplication_and_batching_of_statuses_gives_the_same_stats(
    data: st.DataObject,
) -> None:
    events = data.draw(visit_statuses(max_visits=POLICY.history_length))
    batches = data.draw(delivered(events))
    assert deliver(batches, POLICY) == clean_pass(events, POLICY)


@given(st.data())
def test_long_histories_are_order_insensitive_when_the_kept_history_covers_them(
    data: st.DataObject,
) -> None:
    policy = replace(POLICY, history_length=40)
    events = data.draw(visit_statuses(max_visits=40))
    batches = data.draw(delivered(events))
    assert deliver(batches, policy) == clean_pass(events, policy)


@given(st.data())
def test_the_kept_history_length_does_not_change_an_in_order_result(
    data: st.DataObject,
) -> None:
    events = data.draw(visit_statuses(max_visits=30))
    short = clean_pass(events, replace(POLICY, history_length=1))
    long = clean_pass(events, replace(POLICY, history_length=64))
    assert short.tally == long.tally
    assert short.next_visit_queue_position == long.next_visit_queue_position
    assert short.disabled_for_failures == long.disabled_for_failures


@given(st.data())
def test_ladder_index_never_leaves_its_bounds(data: st.DataObject) -> None:
    events = data.draw(visit_statuses(max_visits=40))
    stats = fresh()
    for batch in data.draw(delivered(events)):
        stats = apply(stats, *batch)
        assert 0 <= stats.tally.next_position_offset <= POLICY.top_index
        if stats.tally.last_visit_number is None:
            continue  # no final status yet
        assert stats.next_visit_queue_position is not None
        assert stats.next_visit_anchor is not None
        ahead = stats.next_visit_queue_position - stats.next_visit_anchor
        assert POLICY.min_interval <= ahead <= POLICY.max_interval * 1.1


@given(duration=st.one_of(st.floats(max_value=-1e-9), st.just(float("nan"))))
def test_a_duration_that_is_no_duration_changes_nothing_whatever_the_arrival_order(
    duration: float,
) -> None:
    plain = event("full", 1, SNAP_A, hours=1)
    odd = structs.replace(plain, metadata={"duration_s": duration})
    assert odd.duration_s is None
    one_way = apply(apply(fresh(), plain), odd)
    other_way = apply(apply(fresh(), odd), plain)
    assert one_way == other_way
    assert one_way.tally.last_duration_s is None


def test_a_finite_duration_is_kept_and_booleans_are_no_duration() -> None:
    timed = structs.replace(event("full", 1, SNAP_A), metadata={"duration_s": 12})
    assert timed.duration_s == 12.0
    assert apply(fresh(), timed).tally.last_duration_s == 12.0
    assert structs.replace(timed, metadata={"duration_s": True}).duration_s is None
    assert structs.replace(timed, metadata={"duration_s": float("inf")}).duration_s is None
