import random
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.backoff import Backoff
from app.domain.lister_schedule import ListerSchedule, after_run, retry_wait

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
