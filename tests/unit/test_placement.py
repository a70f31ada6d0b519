from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from app.domain.cooldown import Cooldowns
from app.domain.placement import MirrorRow, epoch_s, place, pool_of

NOW = datetime(2026, 5, 1, tzinfo=UTC)
TARGET = NOW + timedelta(days=3)
COOL = Cooldowns()


def row(**kw: object) -> MirrorRow:
    base: dict[str, object] = dict(
        id=7,
        visit_type="git",
        next_visit_queue_position=TARGET,
        last_visit_status=None,
        last_final_date=None,
        last_scheduled=None,
        last_successful=None,
        last_update=None,
        never_succeeded=True,
        enabled=True,
    )
    base.update(kw)
    return MirrorRow(**base)  # type: ignore[arg-type]


def test_origin_without_last_update_waits_in_no_last_update_at_its_target() -> None:
    p = place(row(), NOW, COOL)
    assert (p.where, p.pool, p.score) == ("pool", "no_last_update", epoch_s(TARGET))


def test_never_visited_origin_with_last_update_is_ordered_by_last_update() -> None:
    changed = NOW - timedelta(days=40)
    assert pool_of(row(last_update=changed)) == ("never_visited", epoch_s(changed))


def test_never_visited_origin_changed_after_it_was_listed_stays_due_at_its_target() -> None:
    changed = TARGET + timedelta(days=3)
    assert pool_of(row(last_update=changed)) == ("never_visited", epoch_s(TARGET))


def test_origin_changed_after_its_last_visit_is_lagging_by_minus_its_lag() -> None:
    visited, changed = NOW - timedelta(days=10), NOW - timedelta(days=2)
    r = row(last_update=changed, last_successful=visited, never_succeeded=False)
    assert pool_of(r) == ("lagging", -8 * 86400.0)


def test_under_age_optimal_a_reported_change_is_due_its_delay_after_the_first_missed_change() -> (
    None
):
    visited, changed = NOW - timedelta(days=10), NOW - timedelta(days=2)
    delay = 3600.0
    rare = row(
        last_update=changed,
        last_successful=visited,
        never_succeeded=False,
        change_rate_per_day=0.01,  # a change expected every 100 days: the reported one
        reported_change_delay_s=delay,
    )
    assert pool_of(rare) == ("lagging", epoch_s(changed) + delay)
    # a fast changer missed its first change about a mean wait after the visit
    fast = row(
        last_update=changed,
        last_successful=visited,
        never_succeeded=False,
        change_rate_per_day=4.0,
        reported_change_delay_s=delay,
    )
    assert pool_of(fast) == ("lagging", epoch_s(visited) + 86400.0 / 4 + delay)


def test_origin_visited_after_its_last_change_is_up_to_date_at_its_target() -> None:
    r = row(
        last_update=NOW - timedelta(days=5),
        last_successful=NOW - timedelta(days=1),
        never_succeeded=False,
    )
    assert pool_of(r) == ("up_to_date", epoch_s(TARGET))


def test_disabled_origin_is_absent() -> None:
    assert place(row(enabled=False), NOW, COOL).where == "absent"


def test_scheduled_origin_without_result_is_in_flight_until_the_scheduled_cooldown() -> None:
    sent = NOW - timedelta(days=1)
    p = place(row(last_scheduled=sent), NOW, COOL)
    assert (p.where, p.score, p.pool) == ("inflight", epoch_s(sent), "no_last_update")
    lost = place(row(last_scheduled=NOW - COOL.scheduled), NOW, COOL)
    assert lost.where == "pool"


def test_a_final_status_at_the_instant_of_a_send_is_an_earlier_visits_and_ends_no_flight() -> None:
    sent = NOW - timedelta(hours=1)
    at_once = row(last_final_date=sent, last_visit_status="full", last_scheduled=sent)
    assert place(at_once, NOW, COOL).where == "inflight"
    later = sent + timedelta(microseconds=1)
    after = row(last_final_date=later, last_visit_status="full", last_scheduled=sent)
    assert place(after, NOW, COOL).where == "cooling"


def test_recently_visited_origin_cools_down_and_remembers_its_pool() -> None:
    visited = NOW - timedelta(hours=1)
    p = place(
        row(
            last_final_date=visited,
            last_visit_status="full",
            last_scheduled=visited - timedelta(minutes=5),
        ),
        NOW,
        COOL,
    )
    assert (p.where, p.score) == ("cooling", epoch_s(visited + COOL.absolute))
    assert (p.pool, p.pool_score) == ("no_last_update", epoch_s(TARGET))


def test_failed_and_not_found_origins_rest_longer() -> None:
    visited = NOW - timedelta(hours=20)
    failed = place(
        row(last_final_date=visited, last_visit_status="failed", failures_in_a_row=1), NOW, COOL
    )
    gone = place(row(last_final_date=visited, last_visit_status="not_found"), NOW, COOL)
    ok = place(row(last_final_date=visited, last_visit_status="full"), NOW, COOL)
    assert failed.where == "cooling" and failed.score == epoch_s(visited + COOL.failed_first)
    assert gone.score == epoch_s(visited + COOL.not_found)
    assert ok.where == "pool"


def test_a_failed_origin_rests_twice_as_long_per_failure_in_a_row_up_to_the_failed_cooldown() -> (
    None
):
    visited = NOW - timedelta(hours=1)
    rests = [
        place(
            row(last_final_date=visited, last_visit_status="failed", failures_in_a_row=n),
            NOW,
            COOL,
        ).score
        - epoch_s(visited)
        for n in (0, 1, 2, 3, 4, 5, 40)
    ]
    day = 86400.0
    assert rests[:2] == [day, day]  # a first failure; 0 (an older row) reads as 1
    assert rests[2:] == [2 * day, 4 * day, 8 * day, 14 * day, 14 * day]


def test_a_failed_retry_as_long_as_the_failed_cooldown_gives_the_references_flat_rest() -> None:
    flat = Cooldowns(failed_first=COOL.failed)
    visited = NOW - timedelta(hours=1)
    for n in (1, 2, 7):
        p = place(
            row(last_final_date=visited, last_visit_status="failed", failures_in_a_row=n),
            NOW,
            flat,
        )
        assert p.score == epoch_s(visited + COOL.failed)


def test_an_origin_whose_floor_visit_failed_is_retried_twice_a_day_until_disabled() -> None:
    visited = NOW - timedelta(hours=1)
    day = 86400.0

    def rest(n: int, target: datetime) -> float:
        r = row(
            last_final_date=visited,
            last_visit_status="failed",
            failures_in_a_row=n,
            next_visit_queue_position=target,
            last_successful=visited - timedelta(days=58),
            reported_change_delay_s=0.0,  # planned by age_optimal
        )
        return place(r, NOW, COOL).score - epoch_s(visited)

    # the journal puts a visit that failed past the floor's target before the failure
    risky = visited - timedelta(days=6)
    half = COOL.absolute.total_seconds()  # 12 hours
    assert [rest(n, risky) for n in (1, 2, 3, 4, 5)] == [half, half, half, 8 * day, 14 * day]
    # a failure before the floor keeps the doubled rest
    retry = visited + timedelta(hours=12)
    assert [rest(n, retry) for n in (1, 2, 3)] == [day, 2 * day, 4 * day]
    # as many undoubled rests as failures that disable the origin (a setting)
    five = Cooldowns(at_risk_retries=5)
    r = row(
        last_final_date=visited,
        last_visit_status="failed",
        failures_in_a_row=5,
        next_visit_queue_position=risky,
        last_successful=visited - timedelta(days=58),
        reported_change_delay_s=0.0,
    )
    assert place(r, NOW, five).score - epoch_s(visited) == half


def test_under_age_optimal_a_failed_fast_changer_rests_its_change_interval_not_a_day() -> None:
    visited = NOW - timedelta(hours=1)
    hour = 3600.0

    def rest(n: int, rate: float | None, age_optimal: bool = True) -> float:
        r = row(
            last_final_date=visited,
            last_visit_status="failed",
            failures_in_a_row=n,
            last_successful=visited - timedelta(days=2),
            next_visit_queue_position=visited + timedelta(hours=12),
            change_rate_per_day=rate,
            reported_change_delay_s=0.0 if age_optimal else None,
        )
        return place(r, NOW, COOL).score - epoch_s(visited)

    # changes every 16 hours: retried after 16 hours, then doubled
    assert [rest(n, 1.5) for n in (1, 2, 3)] == [16 * hour, 32 * hour, 64 * hour]
    # changes hourly: never retried sooner than the absolute cooldown
    assert [rest(n, 24.0) for n in (1, 2)] == [12 * hour, 24 * hour]
    # a slow changer, no rate yet, or another spacing: failed_first as before
    assert rest(1, 0.2) == rest(1, None) == rest(1, 24.0, age_optimal=False) == 24 * hour
    assert rest(1, 1e-12) == 24 * hour  # a rate near zero does not overflow


def test_under_age_optimal_a_reported_change_is_due_by_the_target_at_the_latest() -> None:
    visited, changed = NOW - timedelta(days=60), NOW - timedelta(days=2)
    floor = visited + timedelta(days=57.6)
    r = row(
        last_update=changed,
        last_successful=visited,
        never_succeeded=False,
        change_rate_per_day=0.001,
        reported_change_delay_s=20 * 86400.0,  # due 18 days from now
        next_visit_queue_position=floor,
    )
    assert pool_of(r) == ("lagging", epoch_s(floor))


def test_when_the_workers_cannot_follow_every_reported_change_quiet_origins_go_first() -> None:
    delay = -3600.0  # negative: counted from the latest reported change
    floor = NOW - timedelta(days=20)  # the floor, long past
    quiet = row(
        last_update=NOW - timedelta(days=30),
        last_successful=NOW - timedelta(days=40),
        never_succeeded=False,
        last_visit_status="full",
        change_rate_per_day=0.01,
        reported_change_delay_s=delay,
    )
    busy = row(
        last_update=NOW - timedelta(hours=2),  # changed again since the last listing
        last_successful=NOW - timedelta(days=60),  # its first missed change, long ago
        never_succeeded=False,
        last_visit_status="full",
        change_rate_per_day=10.0,
        reported_change_delay_s=delay,
        next_visit_queue_position=floor,
    )
    # the delay after the latest change, whatever the first missed one and the floor
    assert pool_of(quiet) == ("lagging", epoch_s(NOW - timedelta(days=30)) + 3600.0)
    assert pool_of(busy) == ("lagging", epoch_s(NOW - timedelta(hours=2)) + 3600.0)
    assert pool_of(quiet)[1] < pool_of(busy)[1]
    # under a load the workers follow: the delay after the first missed change
    planned = msgspec.structs.replace(busy, reported_change_delay_s=3600.0)
    first_missed = NOW - timedelta(days=60) + timedelta(days=1 / 10)
    assert pool_of(planned) == ("lagging", epoch_s(first_missed) + 3600.0)


MOMENTS = st.none() | st.integers(-400, 400).map(lambda d: NOW + timedelta(days=d))


@given(MOMENTS, MOMENTS, MOMENTS, st.booleans(), st.booleans())
def test_every_enabled_origin_has_exactly_one_place(
    last_update: datetime | None,
    last_successful: datetime | None,
    last_scheduled: datetime | None,
    never: bool,
    enabled: bool,
) -> None:
    p = place(
        row(
            last_update=last_update,
            last_successful=last_successful,
            last_scheduled=last_scheduled,
            never_succeeded=never,
            enabled=enabled,
        ),
        NOW,
        COOL,
    )
    assert (p.where == "absent") == (not enabled)
    assert p.pool in ("never_visited", "lagging", "no_last_update", "up_to_date")


def test_a_visit_must_start_within_nine_tenths_of_its_window() -> None:
    from app.domain.cooldown import start_within_s

    assert start_within_s(100.0, 100.0, 10.0) == 9.0
    assert start_within_s(100.0, 108.5, 10.0) == 0.5
    assert start_within_s(100.0, 109.0, 10.0) <= 0  # too late: the scheduler takes it back


def test_a_visit_must_end_after_it_may_start_and_before_the_scheduler_takes_it_back() -> None:
    from app.domain.cooldown import finish_by_s, start_within_s

    assert finish_by_s(100.0, 10.0) == 109.5
    assert 100.0 + start_within_s(100.0, 100.0, 10.0) < finish_by_s(100.0, 10.0) < 110.0


def test_a_requests_visit_may_wait_most_of_its_time_limit_and_run_it_all_before_its_deadline() -> (
    None
):
    from app.domain.cooldown import finish_by_s, request_window_s, start_within_s

    window = request_window_s(60.0)  # the request is pending again at 120 s
    assert start_within_s(0.0, 50.0, window) > 0
    assert 50.0 + 60.0 < finish_by_s(0.0, window) < window
