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

When ``revisit lister schedule`` changes a schedule (``rescheduled``):

| given | next full run | next incremental run |
|---|---|---|
| a first run (``--start-in``) | that time | that time + incremental interval |
| nothing, a new schedule | now | now + incremental interval |
| nothing, a known schedule | the earlier of its own and now + full | the same, incremental |

so a shorter interval takes effect at once and a longer one waits for the
run already planned. No incremental interval: no incremental run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from app.domain.backoff import Backoff

#: Shortest interval a schedule takes (full or incremental): a lister sent
#: every few seconds hammers its forge and floods the lister queue.
MIN_LISTER_INTERVAL_S = 60.0


class ScheduleError(ValueError):
    """A schedule that cannot be set; ``field`` names the option at fault."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


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


def check_intervals(
    full_interval: timedelta,
    incremental_interval: timedelta | None,
    shortest: timedelta = timedelta(seconds=MIN_LISTER_INTERVAL_S),
) -> None:
    """Refuse an interval below ``shortest`` or an incremental interval not
    shorter than the full one (the full listing already reports everything)."""
    if full_interval < shortest:
        raise ScheduleError(
            "every", f"{full_interval} is below the shortest, {shortest}: give at least that"
        )
    if incremental_interval is None:
        return
    if incremental_interval < shortest:
        raise ScheduleError(
            "incremental-every",
            f"{incremental_interval} is below the shortest, {shortest}: give at least that",
        )
    if incremental_interval >= full_interval:
        raise ScheduleError(
            "incremental-every",
            f"{incremental_interval} is not shorter than --every ({full_interval}): "
            "give a shorter one, or 0 for full listings only",
        )


def rescheduled(
    current: ListerSchedule | None,
    full_interval: timedelta,
    incremental_interval: timedelta | None,
    first_run: datetime | None,
    now: datetime,
) -> ListerSchedule:
    """The schedule with new intervals (see the module's second table)."""
    failures = current.failures_in_a_row if current else 0
    if first_run is not None or current is None:
        start = first_run or now
        incremental_run = start + incremental_interval if incremental_interval else None
        return ListerSchedule(full_interval, incremental_interval, start, incremental_run, failures)
    next_full = min(current.next_full_run, now + full_interval)
    next_incremental = None
    if incremental_interval is not None:
        candidates = [now + incremental_interval, current.next_incremental_run]
        next_incremental = min(t for t in candidates if t is not None)
    return ListerSchedule(
        full_interval, incremental_interval, next_full, next_incremental, failures
    )
