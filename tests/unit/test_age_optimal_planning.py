"""Age-optimal planning as the multiplier moves: the lateness controller and the
re-planning of targets (pure)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from app.domain.allocation import (
    LATEST_CHANGE_MIN_DELAY_S,
    corrected_multiplier,
    counts_from_latest_change,
    known_change_delay_s,
    lateness_reference_s,
    reported_change_delay_s,
)
from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_stats import (
    MAX_COST_WEIGHT,
    OriginStats,
    StatsPolicy,
    apply_events,
    change_delay_s,
    keyed_fudge,
    known_change_bound,
    replanned_target,
    visit_cost_s,
    visit_cost_weight,
)

DAY_S = 86400.0
FLOOR_S = 57.6 * DAY_S
MIN_S = 0.5 * DAY_S
MU = 1e11  # s²: sqrt(2 mu) is about 5.2 days
ROOM = MIN_S**2 / 2  # μ at its lower clamp: sqrt(2 mu) is min_interval
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
FUDGE = keyed_fudge()
URL = "https://example.org/r.git"


def policy(multiplier: float | None) -> StatsPolicy:
    return StatsPolicy(
        ladder_unit=DAY,
        min_interval=timedelta(hours=12),
        max_interval=64 * DAY,
        spacing="age_optimal",
        age_multiplier_s2=multiplier,
    )


def visits(count: int, every_days: float, changed: bool) -> list[VisitStatusEvent]:
    return [
        VisitStatusEvent(
            URL,
            "git",
            k + 1,
            T0 + k * every_days * DAY,
            "full",
            bytes([k if changed else 0]) * 20,
        )
        for k in range(count)
    ]


def fold(events: list[VisitStatusEvent], multiplier: float | None) -> OriginStats:
    stats = OriginStats(url=URL, visit_type="git")
    return apply_events(stats, events, T0 + 400 * DAY, policy(multiplier), FUDGE).stats


def test_late_planned_visits_raise_the_multiplier_and_early_ones_lower_it() -> None:
    late = corrected_multiplier(MU, 2 * DAY_S, 0.5, FLOOR_S, MIN_S)
    early = corrected_multiplier(MU, -2 * DAY_S, 0.5, FLOOR_S, MIN_S)
    on_time = corrected_multiplier(MU, 0.0, 0.5, FLOOR_S, MIN_S)
    assert early < on_time == MU < late
    reference = lateness_reference_s(MU, FLOOR_S)
    assert late == pytest.approx(MU * math.exp(0.5 * 2 * DAY_S / reference))


def test_one_very_late_pick_moves_the_multiplier_no_more_than_a_full_reference_late() -> None:
    reference = lateness_reference_s(MU, FLOOR_S)
    assert corrected_multiplier(MU, 100 * reference, 0.5, FLOOR_S, MIN_S) == pytest.approx(
        MU * math.exp(0.5)
    )


def test_the_multiplier_stays_between_the_minimum_interval_and_the_floor() -> None:
    high = corrected_multiplier(FLOOR_S**2 / 2, FLOOR_S, 1.0, FLOOR_S, MIN_S)
    low = corrected_multiplier(MIN_S**2 / 2, -FLOOR_S, 1.0, FLOOR_S, MIN_S)
    assert high == pytest.approx(FLOOR_S**2 / 2)
    assert low == pytest.approx(MIN_S**2 / 2)


def test_replanning_gives_the_target_the_journal_would_plan_under_the_new_multiplier() -> None:
    events = visits(6, 2.0, changed=True)
    planned_before = fold(events, MU)
    planned_now = fold(events, 4 * MU)
    replanned = replanned_target(planned_before, policy(4 * MU), FUDGE)
    assert replanned is not None
    target, delay = replanned
    assert target == planned_now.next_visit_queue_position
    assert delay == planned_now.reported_change_delay_s
    assert planned_before.next_visit_queue_position is not None
    assert target > planned_before.next_visit_queue_position  # a larger μ spaces visits more
    assert delay is not None and planned_before.reported_change_delay_s is not None
    # and waits longer after a change (4 μ is past the cap: counted from the latest)
    assert abs(delay) > planned_before.reported_change_delay_s


def test_nothing_is_replanned_without_a_multiplier_or_after_a_failed_visit() -> None:
    stats = fold(visits(3, 2.0, changed=True), MU)
    assert replanned_target(stats, policy(None), FUDGE) is None
    failed = VisitStatusEvent(URL, "git", 9, T0 + 30 * DAY, "failed", None)
    after = apply_events(stats, [failed], T0, policy(MU), FUDGE).stats
    assert replanned_target(after, policy(MU), FUDGE) is None
    assert replanned_target(stats, replace(policy(MU), spacing="ladder"), FUDGE) is None


def test_before_the_first_multiplier_targets_are_real_time_from_the_visit() -> None:
    events = visits(2, 1.0, changed=True)
    far_position = T0 + 300 * DAY  # a queue position far ahead of real time
    stats = apply_events(
        OriginStats(url=URL, visit_type="git"), events, far_position, policy(None), FUDGE
    ).stats
    assert stats.next_visit_queue_position is not None
    last = events[-1].date
    assert last < stats.next_visit_queue_position <= last + 0.9 * 64 * DAY


def half_changed(count: int, every_days: float, duration_s: float | None) -> list[VisitStatusEvent]:
    """Visits every other one of which finds the snapshot of the one before."""
    return [
        VisitStatusEvent(
            URL,
            "git",
            k + 1,
            T0 + k * every_days * DAY,
            "full",
            bytes([k // 2]) * 20,
            None if duration_s is None else {"duration_s": duration_s * (1 + k % 2)},
        )
        for k in range(count)
    ]


def test_an_origin_whose_visits_cost_more_is_visited_less_often() -> None:
    costed = replace(policy(MU), visit_cost_reference_s=60.0)
    stats = OriginStats(url=URL, visit_type="git")

    def target(duration_s: float | None, multiplier: float = MU) -> datetime | None:
        events = half_changed(6, 2.0, duration_s)
        p = replace(costed, age_multiplier_s2=multiplier)
        return apply_events(stats, events, T0, p, FUDGE).stats.next_visit_queue_position

    cheap, costly = target(30.0), target(300.0)  # uneventful visits: 60 s, 600 s
    assert cheap is not None and costly is not None
    # a typical cost plans as if costs were unknown; ten times it spaces visits more
    assert cheap == target(None)
    assert costly > cheap
    assert costly == target(None, 10 * MU)  # exactly as ten times the multiplier would


def test_the_visit_cost_is_what_uneventful_visits_took_and_its_weight_is_bounded() -> None:
    stats = fold(half_changed(6, 2.0, None), MU)
    assert visit_cost_s(stats.history) is None  # no duration reported
    # uneventful visits (the 2nd, 4th, 6th) took 2 x 30 s; eventful ones 30 s
    stats = fold(half_changed(6, 2.0, 30.0), MU)
    assert visit_cost_s(stats.history) == 60.0
    every_visit_changed = [
        structs.replace(e, metadata={"duration_s": 5.0}) for e in visits(6, 2.0, changed=True)
    ]
    assert visit_cost_s(fold(every_visit_changed, MU).history) is None
    failed = VisitStatusEvent(URL, "git", 7, T0 + 13 * DAY, "failed", None, {"duration_s": 1.0})
    assert visit_cost_s(fold([*half_changed(6, 2.0, 30.0), failed], MU).history) == 60.0
    assert visit_cost_weight(30.0, 60.0) == 0.5
    assert visit_cost_weight(None, 60.0) == visit_cost_weight(30.0, None) == 1.0
    assert visit_cost_weight(1e9, 1.0) == MAX_COST_WEIGHT
    assert visit_cost_weight(1e-9, 1.0) == 1 / MAX_COST_WEIGHT


@given(
    rate_per_day=st.floats(1e-4, 1e3),
    multiplier_s2=st.floats(1.0, 1e14),
)
def test_the_delay_after_a_reported_change_minimises_age_plus_the_price_of_visits(
    rate_per_day: float, multiplier_s2: float
) -> None:
    rate = rate_per_day / DAY_S
    floor = 1e12  # out of the way

    def cost(delay: float) -> float:  # (τ²/2 + μ) / (1/λ + τ): mean age + μ visits
        return (delay * delay / 2 + multiplier_s2) / (1 / rate + delay)

    delay = reported_change_delay_s(rate, multiplier_s2, floor)
    assert delay >= 0
    for other in (delay * 0.9, delay * 1.1 + 1e-3):
        assert cost(delay) <= cost(other) * (1 + 1e-12)


def test_a_fast_changer_waits_the_common_interval_and_a_rare_change_is_chased_at_once() -> None:
    mu = 1e10
    fast = reported_change_delay_s(1e3 / DAY_S, mu, 1e12)
    rare = reported_change_delay_s(1e-6 / DAY_S, mu, 1e12)
    assert fast == pytest.approx(math.sqrt(2 * mu), rel=1e-2)
    assert rare == pytest.approx(mu * 1e-6 / DAY_S, rel=1e-3)
    assert reported_change_delay_s(1 / DAY_S, math.inf, 5.0) == 5.0
    assert reported_change_delay_s(1 / DAY_S, mu, 5.0) == 5.0
    assert reported_change_delay_s(0.0, mu, 1e12) == 0.0


@given(
    rate_per_day=st.floats(0.0, 1e3),
    multiplier_s2=st.one_of(st.floats(1.0, 1e16), st.just(math.inf)),
    bound_days=st.floats(0.01, 60.0),
    soon_days=st.floats(0.01, 60.0),
)
def test_a_known_change_waits_at_most_min_interval_and_the_bound_and_never_longer_than_by_rate(
    rate_per_day: float, multiplier_s2: float, bound_days: float, soon_days: float
) -> None:
    rate, bound, soon = rate_per_day / DAY_S, bound_days * DAY_S, soon_days * DAY_S
    known = known_change_delay_s(rate, multiplier_s2, FLOOR_S, bound, soon)
    planned = reported_change_delay_s(rate, multiplier_s2, FLOOR_S)
    if multiplier_s2 <= bound * bound / 2:  # below the cap, at most min_interval
        assert known == reported_change_delay_s(rate, min(multiplier_s2, soon * soon / 2), FLOOR_S)
        assert 0 <= known <= min(soon, FLOOR_S, planned) * (1 + 1e-12)
    else:  # past it, from the latest reported change (negated), at least a second
        assert counts_from_latest_change(known)
        known = abs(known) if abs(known) > LATEST_CHANGE_MIN_DELAY_S else 0.0
        assert 0 <= known <= min(bound, FLOOR_S, planned) * (1 + 1e-12)


def test_while_the_workers_keep_up_a_reported_change_waits_at_most_min_interval() -> None:
    busy = policy(MU)  # the guesses' common interval sqrt(2 mu) is about 5.2 days
    for per_day in (0.01, 0.1, 1.0, 10.0, 100.0):
        rate = per_day / DAY_S
        by_mu = reported_change_delay_s(rate, MU, FLOOR_S)
        delay = change_delay_s(busy, rate, MU)
        assert delay is not None and not counts_from_latest_change(delay)
        assert delay == reported_change_delay_s(rate, ROOM, FLOOR_S)  # μ at its lower clamp
        assert delay <= MIN_S
        assert delay < by_mu  # sooner than the guesses' multiplier would plan it
    # with room to spare already, the multiplier decides
    assert change_delay_s(policy(ROOM / 2), 1 / DAY_S, ROOM / 2) == reported_change_delay_s(
        1 / DAY_S, ROOM / 2, FLOOR_S
    )


def test_under_overload_a_reported_change_is_due_within_days_not_at_the_floor() -> None:
    overloaded = policy(FLOOR_S**2 / 2)  # the multiplier's clamp
    bound_s = known_change_bound(overloaded).total_seconds()
    assert bound_s == pytest.approx(6.4 * DAY_S)
    for per_day, within_days in ((0.01, 0.25), (0.1, 1.9), (1.0, 5.5), (10.0, 6.4)):
        planned = reported_change_delay_s(per_day / DAY_S, FLOOR_S**2 / 2, FLOOR_S)
        assert planned > 15 * DAY_S  # what the multiplier alone gives
        for mu in (FLOOR_S**2 / 2, math.inf):
            delay = change_delay_s(replace(overloaded, age_multiplier_s2=mu), per_day / DAY_S, mu)
            assert delay is not None and counts_from_latest_change(delay)
            assert -delay <= within_days * DAY_S


def test_past_the_cap_on_mu_a_known_change_is_due_its_delay_after_the_latest_change() -> None:
    bound = 6.4 * DAY_S
    cap = bound * bound / 2
    for per_day in (0.01, 1.0, 10.0):
        rate = per_day / DAY_S
        # under the cap (the fastest changers visited within the bound): planned
        # with μ at its lower clamp
        below = known_change_delay_s(rate, cap / 2, FLOOR_S, bound, MIN_S)
        assert below == reported_change_delay_s(rate, ROOM, FLOOR_S)
        assert not counts_from_latest_change(below)
        # past it, at the cap's delay, counted from the latest reported change
        for mu in (cap * 1.01, FLOOR_S**2 / 2, math.inf):
            past = known_change_delay_s(rate, mu, FLOOR_S, bound, MIN_S)
            assert counts_from_latest_change(past)
            assert -past == max(1.0, reported_change_delay_s(rate, cap, FLOOR_S))
    # an origin not known to change keeps the sign: a delay of a second
    assert known_change_delay_s(0.0, math.inf, FLOOR_S, bound, MIN_S) == -LATEST_CHANGE_MIN_DELAY_S


def test_a_failed_visit_near_the_floor_is_due_by_the_floor_counted_from_the_last_success() -> None:
    stats = fold(visits(2, 1.0, changed=False), MU)
    last_success = T0 + DAY
    # the floor visit fails (a forge outage) long after the last success
    failed = VisitStatusEvent(URL, "git", 3, last_success + 57.5 * DAY, "failed", None)
    anchor = last_success + 57.5 * DAY  # the retry (+ 12 h) would be past the floor
    after = apply_events(stats, [failed], anchor, policy(MU), FUDGE).stats
    assert after.next_visit_queue_position == last_success + timedelta(seconds=FLOOR_S)
    # a failure soon after a success is retried at the minimum interval, as before
    early = VisitStatusEvent(URL, "git", 3, last_success + 2 * DAY, "failed", None)
    soon = apply_events(stats, [early], last_success + 2 * DAY, policy(MU), FUDGE).stats
    assert soon.next_visit_queue_position == last_success + 2 * DAY + timedelta(seconds=MIN_S)


def test_a_visit_that_failed_past_the_floor_is_due_the_floor_margin_before_the_floor() -> None:
    stats = fold(visits(2, 1.0, changed=False), MU)
    last_success = T0 + DAY
    margin = timedelta(days=64) - timedelta(seconds=FLOOR_S)
    for past in (0.0, 1.5, 10.0):  # at the floor, during an outage, long after
        moment = last_success + timedelta(seconds=FLOOR_S) + past * DAY
        failed = VisitStatusEvent(URL, "git", 3, moment, "failed", None)
        after = apply_events(stats, [failed], moment, policy(MU), FUDGE).stats
        due = after.next_visit_queue_position
        assert due == last_success + timedelta(seconds=FLOOR_S) - margin
        assert due is not None and due < moment  # due at once, ahead of later work


def test_a_failed_visit_is_retried_in_real_time_however_far_ahead_the_queue_position() -> None:
    stats = fold(visits(2, 1.0, changed=True), MU)
    failed_at = T0 + 3 * DAY
    failed = VisitStatusEvent(URL, "git", 3, failed_at, "failed", None)
    far_position = failed_at + 30 * DAY  # the queue position, a month ahead of real time
    after = apply_events(stats, [failed], far_position, policy(MU), FUDGE).stats
    assert after.next_visit_queue_position == failed_at + timedelta(seconds=MIN_S)
    # the ladder keeps seed 000's queue-position time
    ladder = replace(policy(MU), spacing="ladder")
    queued = apply_events(stats, [failed], far_position, ladder, FUDGE).stats
    assert queued.next_visit_queue_position == far_position + timedelta(seconds=MIN_S)


def test_a_partial_visit_that_saved_something_is_followed_up_at_the_minimum_interval() -> None:
    stats = fold(visits(2, 1.0, changed=False), MU)
    cut_at = T0 + 9 * DAY
    # cut at the loader's time limit, with a snapshot the origin did not have
    cut = VisitStatusEvent(URL, "git", 3, cut_at, "partial", b"\x07" * 20)
    after = apply_events(stats, [cut], cut_at, policy(MU), FUDGE).stats
    assert after.next_visit_queue_position == cut_at + timedelta(seconds=MIN_S)
    # the same visit ended full is planned at the learned rate, later
    full = VisitStatusEvent(URL, "git", 3, cut_at, "full", b"\x07" * 20)
    planned = apply_events(stats, [full], cut_at, policy(MU), FUDGE).stats.next_visit_queue_position
    assert planned is not None and planned > cut_at + 2 * timedelta(seconds=MIN_S)
    # a partial visit that saved nothing new is planned as usual: no hammering
    same = VisitStatusEvent(URL, "git", 3, cut_at, "partial", bytes(20))
    usual = apply_events(stats, [same], cut_at, policy(MU), FUDGE).stats.next_visit_queue_position
    assert usual is not None and usual > cut_at + 2 * timedelta(seconds=MIN_S)


def reported(events: list[VisitStatusEvent], multiplier: float = ROOM) -> OriginStats:
    """The stats of an origin whose lister reports last_update, after ``events``."""
    stats = OriginStats(url=URL, visit_type="git", reports_last_update=True)
    return apply_events(stats, events, T0, policy(multiplier), FUDGE).stats


def planned_in_days(stats: OriginStats, last: VisitStatusEvent) -> float:
    assert stats.next_visit_queue_position is not None
    return (stats.next_visit_queue_position - last.date) / DAY


def test_with_workers_to_spare_a_reported_fast_changer_does_not_wait_for_its_lister() -> None:
    events = visits(12, 1.0, changed=True)  # a change every day, seen by every visit
    in_days = planned_in_days(reported(events), events[-1])
    assert 0.5 * 0.9 <= in_days < 5  # its age-optimal interval, far from the floor
    # planned like an origin without last_update, but at the rate learned, not
    # the optimistic one: a little later
    unreported = planned_in_days(fold(events, ROOM), events[-1])
    assert unreported < in_days < unreported * 1.1


def test_with_workers_scarce_a_reported_fast_changer_waits_for_its_lister() -> None:
    events = visits(12, 1.0, changed=True)
    assert planned_in_days(reported(events, multiplier=MU), events[-1]) > 50


def test_a_visit_that_found_nothing_holds_a_reported_origin_to_its_lister_till_changes_follow() -> (
    None
):
    events = visits(12, 1.0, changed=True)
    useless = VisitStatusEvent(URL, "git", 13, T0 + 12 * DAY, "full", events[-1].snapshot)
    held = reported([*events, useless])
    assert planned_in_days(held, useless) == pytest.approx(0.9 * 64, rel=0.11)  # the floor
    after = [
        VisitStatusEvent(URL, "git", 14 + k, T0 + (13 + k) * DAY, "full", bytes([100 + k]) * 20)
        for k in range(20)
    ]
    assert planned_in_days(reported([*events, useless, *after[:5]]), after[4]) > 50
    assert planned_in_days(reported([*events, useless, *after]), after[-1]) < 5


def test_a_reported_origin_expecting_no_change_within_its_interval_waits_for_its_lister() -> None:
    events = visits(12, 20.0, changed=True)  # a change every 20 days or so
    assert planned_in_days(reported(events), events[-1]) > 50
