import random
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.backoff import Backoff
from app.domain.lister_schedule import (
    ListerSchedule,
    ScheduleError,
    after_run,
    check_intervals,
    rescheduled,
    retry_wait,
)

NOW = datetime(2026, 7, 1, tzinfo=UTC)
DAY, HOUR, MINUTE = timedelta(days=1), timedelta(hours=1), timedelta(minutes=1)
BACKOFF = Backoff(MINUTE.total_seconds(), (6 * HOUR).total_seconds())
SCHEDULE = ListerSchedule(DAY, HOUR, NOW, NOW, failures_in_a_row=2)


def test_a_successful_full_listing_moves_both_runs_and_clears_failures() -> None:
    after = after_run(
        SCHEDULE, full=True, succeeded=True, now=NOW, backoff=BACKOFF, rng=random.Random(1)
    )
    assert (after.next_full_run, after.next_incremental_run) == (NOW + DAY, NOW + HOUR)
    assert after.failures_in_a_row == 0


def test_a_successful_incremental_listing_leaves_the_full_run_alone() -> None:
    due = ListerSchedule(DAY, HOUR, NOW + 3 * HOUR, NOW)
    after = after_run(
        due, full=False, succeeded=True, now=NOW, backoff=BACKOFF, rng=random.Random()
    )
    assert (after.next_full_run, after.next_incremental_run) == (NOW + 3 * HOUR, NOW + HOUR)


@pytest.mark.parametrize(
    ("failures", "wait"),
    [(1, MINUTE), (2, 2 * MINUTE), (5, 16 * MINUTE), (12, 6 * HOUR), (200, 6 * HOUR)],
)
def test_retry_waits_double_per_failure_up_to_the_maximum(failures: int, wait: timedelta) -> None:
    assert retry_wait(failures, DAY, BACKOFF) == wait


def test_a_retry_never_waits_longer_than_the_listers_own_interval() -> None:
    assert retry_wait(20, 10 * MINUTE, BACKOFF) == 10 * MINUTE


def test_a_failed_run_backs_off_with_jitter_and_counts_the_failure() -> None:
    after = after_run(
        SCHEDULE, full=True, succeeded=False, now=NOW, backoff=BACKOFF, rng=random.Random(7)
    )
    assert after.failures_in_a_row == 3
    assert NOW + 4 * MINUTE * 0.9 <= after.next_full_run < NOW + 4 * MINUTE * 1.1
    assert after.next_incremental_run == NOW


@pytest.mark.parametrize(
    ("full", "incremental", "field"),
    [
        (timedelta(seconds=1), None, "every"),
        (MINUTE - timedelta(microseconds=1), None, "every"),
        (DAY, timedelta(seconds=30), "incremental-every"),
        (HOUR, HOUR, "incremental-every"),
        (HOUR, DAY, "incremental-every"),
    ],
)
def test_intervals_below_a_minute_or_an_incremental_one_not_shorter_are_refused(
    full: timedelta, incremental: timedelta | None, field: str
) -> None:
    with pytest.raises(ScheduleError) as refused:
        check_intervals(full, incremental)
    assert refused.value.field == field


def test_a_minute_and_an_incremental_interval_below_the_full_one_are_accepted() -> None:
    check_intervals(MINUTE, None)
    check_intervals(DAY, MINUTE)
    check_intervals(MINUTE, timedelta(seconds=4), shortest=timedelta(seconds=4))


def test_a_shorter_interval_takes_effect_at_once_and_a_longer_one_waits_for_the_planned_run() -> (
    None
):
    current = ListerSchedule(DAY, None, NOW + 20 * HOUR, None, failures_in_a_row=1)
    shorter = rescheduled(current, HOUR, MINUTE * 10, None, NOW)
    assert (shorter.next_full_run, shorter.next_incremental_run) == (NOW + HOUR, NOW + 10 * MINUTE)
    assert shorter.failures_in_a_row == 1
    longer = rescheduled(current, 7 * DAY, None, None, NOW)
    assert (longer.next_full_run, longer.next_incremental_run) == (NOW + 20 * HOUR, None)
    started = rescheduled(current, DAY, HOUR, NOW + 2 * DAY, NOW)
    assert (started.next_full_run, started.next_incremental_run) == (NOW + 2 * DAY, NOW + 49 * HOUR)
    new = rescheduled(None, DAY, HOUR, None, NOW)
    assert (new.next_full_run, new.next_incremental_run, new.failures_in_a_row) == (
        NOW,
        NOW + HOUR,
        0,
    )
