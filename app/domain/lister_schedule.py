"""When a scheduled lister runs next: its intervals, and backoff after failures.

A lister instance has a full listing every ``full_interval`` and, optionally,
an incremental one every ``incremental_interval``. After a run:

| outcome | next full run | next incremental run | failures in a row |
|---|---|---|---|
| full listing succeeded | now + full interval | now + incremental interval | 0 |
| incremental succeeded | unchanged | now + incremental interval | 0 |
| failed | that kind's run: now + retry wait | (the other kind unchanged) | + 1 |

The retry wait doubles with each failure in a row from the backoff's initial
wait up to its maximum (``app.domain.backoff``), never beyond the kind's own
interval, times a jitter in [0.9, 1.1) drawn from the ``rng`` passed in, so
failing listers of one forge do not retry in step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from app.domain.backoff import Backoff


@dataclass(frozen=True)
class ListerSchedule:
    """The timing of one scheduled lister instance."""

    full_interval: timedelta
    incremental_interval: timedelta | None
    next_full_run: datetime
    next_incremental_run: datetime | None
    failures_in_a_row: int = 0


def retry_wait(failures_in_a_row: int, interval: timedelta, backoff: Backoff) -> timedelta:
    """The wait before retrying after ``failures_in_a_row`` (≥ 1) failures, before jitter."""
    return min(timedelta(seconds=backoff.delay_s(failures_in_a_row)), interval)


def after_run(
    schedule: ListerSchedule,
    *,
    full: bool,
    succeeded: bool,
    now: datetime,
    backoff: Backoff,
    rng: random.Random,
) -> ListerSchedule:
    """The schedule after a run of the given kind ended (see the module's table)."""
    incremental = schedule.incremental_interval
    if succeeded:
        next_incremental = now + incremental if incremental else None
        if full:
            return replace(
                schedule,
                next_full_run=now + schedule.full_interval,
                next_incremental_run=next_incremental,
                failures_in_a_row=0,
            )
        return replace(schedule, next_incremental_run=next_incremental, failures_in_a_row=0)
    failures = schedule.failures_in_a_row + 1
    interval = schedule.full_interval if full or incremental is None else incremental
    wait = retry_wait(failures, interval, backoff) * rng.uniform(0.9, 1.1)
    if full:
        return replace(schedule, next_full_run=now + wait, failures_in_a_row=failures)
    return replace(schedule, next_incremental_run=now + wait, failures_in_a_row=failures)
