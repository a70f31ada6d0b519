"""Recurrent lister runs: schedules, sending due runs, running one, recording its outcome.

``revisit lister schedule`` gives a lister instance its intervals and
arguments, or changes them (``schedule_lister``: checked before anything is
written), ``pause_lister`` and ``unschedule_lister`` stop it; the lister
scheduler (``actors.lister_scheduler``) claims due runs (``claim_due_runs``)
and sends each to the lister queue; a lister worker runs
it (``execute_run``): the lister's pages are recorded as a listing (a full
one disables what it no longer reports), its state saved after each page,
and the outcome sets the next run (``app.domain.lister_schedule``: intervals,
backoff after failures).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any
from uuid import UUID

from app.db import lister_runs as db
from app.db.connection import DictConnection
from app.db.listings import UnknownLister, find_lister, register_lister
from app.domain.backoff import Backoff
from app.domain.lister_schedule import (
    MIN_LISTER_INTERVAL_S,
    ListerSchedule,
    ScheduleError,
    after_run,
    check_intervals,
    rescheduled,
)
from app.listers.plugin import Lister, ListerRequest, get_lister_plugin
from app.services.context import Context
from app.services.listing import finish_listing, record_listed_origins, start_listing
from app.services.requests import end_listing_request, request_first_visits

#: A new schedule's full listing interval when none is given.
DEFAULT_FULL_INTERVAL = timedelta(days=1)
#: Origins recorded per transaction by a run.
LISTER_BATCH_SIZE = 1000
#: Wait before retrying a failed run; doubles per failure up to the next constant.
LISTER_RETRY_BASE_S = 60.0
#: Longest wait between retries of a failing lister.
LISTER_RETRY_MAX_S = 6 * 3600.0
#: A run not finished after this long is lost: its time limit, and when it is sent again.
LISTER_RUN_TIMEOUT_S = 6 * 3600.0


@dataclass(frozen=True)
class ScheduledRun:
    """A run sent to the lister queue."""

    run_id: int
    lister_id: UUID
    full: bool


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended."""

    run_id: int
    lister: str
    full: bool
    succeeded: bool
    origins_listed: int
    error: str | None
    next_schedule: ListerSchedule | None


@dataclass(frozen=True)
class ScheduleSet:
    """A schedule as ``schedule_lister`` left it."""

    lister_id: UUID
    created: bool
    enabled: bool
    arguments: dict[str, Any]
    schedule: ListerSchedule


class NoSchedule(LookupError):
    """The lister instance has no schedule; the text names the scheduled ones."""


def schedule_lister(
    conn: DictConnection,
    name: str,
    instance_name: str,
    now: datetime,
    *,
    arguments: dict[str, Any] | None = None,
    full_interval: timedelta | None = None,
    incremental_interval: timedelta | None = None,
    first_run: datetime | None = None,
    shortest: timedelta = timedelta(seconds=MIN_LISTER_INTERVAL_S),
) -> ScheduleSet:
    """Register the lister instance if new and create or change its schedule.

    What is not given keeps its value (a new schedule: no arguments, a full
    listing a day, no incremental one); ``incremental_interval`` of 0 removes
    incremental listings. The lister must be installed (``revisit.listers``)
    and take the arguments; the intervals are held to ``check_intervals``.
    Raises UnknownListerPlugin or ScheduleError before anything is written.
    """
    plugin = get_lister_plugin(name)  # refuses an unknown lister, naming the installed ones
    with conn.transaction():
        found = _lister_id(conn, name, instance_name)
        current, stored = (found and db.get_schedule(conn, found)) or (None, {})
        given = stored if arguments is None else arguments
        full = full_interval or (current.full_interval if current else DEFAULT_FULL_INTERVAL)
        incremental = current.incremental_interval if current else None
        if incremental_interval is not None:
            incremental = incremental_interval or None
        check_intervals(full, incremental, shortest)
        try:
            plugin.check_arguments(given)
        except ValueError as exc:
            raise ScheduleError("arg", f"{name}: {exc}") from exc
        schedule = rescheduled(current, full, incremental, first_run, now)
        lister_id = found or register_lister(conn, name, instance_name, None)
        enabled = db.upsert_schedule(conn, lister_id, given, schedule)
    return ScheduleSet(lister_id, current is None, enabled, given, schedule)


def _lister_id(conn: DictConnection, name: str, instance_name: str) -> UUID | None:
    try:
        lister_id: UUID = find_lister(conn, name, instance_name)["id"]
    except UnknownLister:
        return None
    return lister_id


def _scheduled(conn: DictConnection, name: str, instance_name: str) -> UUID:
    lister_id = _lister_id(conn, name, instance_name)
    if lister_id is None or db.get_schedule(conn, lister_id) is None:
        names = [f"{r['name']}/{r['instance_name']}" for r in db.all_schedules(conn)]
        raise NoSchedule(
            f"{name}/{instance_name} has no schedule (scheduled: {', '.join(names) or 'none'})"
        )
    return lister_id


def pause_lister(conn: DictConnection, name: str, instance_name: str, paused: bool) -> None:
    """Pause a schedule (the lister scheduler sends none of its runs from its
    next step on) or resume it (what fell due meanwhile is sent at once)."""
    with conn.transaction():
        db.enable_schedule(conn, _scheduled(conn, name, instance_name), not paused)


def unschedule_lister(conn: DictConnection, name: str, instance_name: str, now: datetime) -> None:
    """Remove a lister instance's schedule; its runs and listed origins stay."""
    with conn.transaction():
        db.delete_schedule(conn, _scheduled(conn, name, instance_name), now)


def claim_due_runs(
    conn: DictConnection, now: datetime, run_timeout: timedelta
) -> list[ScheduledRun]:
    """Create a run for each due schedule with none out, at most a hundred (a run
    out longer than ``run_timeout`` is marked lost); the caller sends them to the
    lister queue."""
    rows = db.claim_due_runs(conn, now, now - run_timeout, 100)
    return [ScheduledRun(r["id"], r["lister_id"], r["full_listing"]) for r in rows]


def execute_run(
    conn: DictConnection,
    ctx: Context,
    run_id: int,
    clock: Callable[[], datetime],
    rng: random.Random,
) -> RunOutcome | None:
    """Run one lister run and record its outcome; None if the run is not startable
    (lost and re-sent, or already started by another worker)."""
    run = db.start_run(conn, run_id, clock())
    if run is None:
        return None
    lister_id, full = run["lister_id"], bool(run["full_listing"])
    listed, error = 0, None
    try:
        listed = _list(conn, ctx, run, get_lister_plugin(run["name"]), clock)
    except Exception as exc:  # a lister's failure is its run's outcome, not the worker's
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:2000]
    schedule = _finish(conn, run_id, lister_id, full, error, clock(), rng)
    if full:
        end_listing_request(conn, lister_id, error, clock())
    name = f"{run['name']}/{run['instance_name']}"
    return RunOutcome(run_id, name, full, error is None, listed, error, schedule)


def _list(
    conn: DictConnection,
    ctx: Context,
    run: dict[str, Any],
    lister: Lister,
    clock: Callable[[], datetime],
) -> int:
    lister_id, full = run["lister_id"], bool(run["full_listing"])
    started = start_listing(conn, lister_id, clock())
    request = ListerRequest(run["arguments"], run["current_state"], full, started)
    listed = 0
    for page in lister.pages(request):
        origins = iter(page.origins)
        while batch := list(islice(origins, LISTER_BATCH_SIZE)):
            rows = list(enumerate(batch, start=listed + 1))
            listed += record_listed_origins(conn, ctx, lister_id, rows, clock())
            if full:  # an add forge now's listing: their first visits are requests
                listed_now = [(o.url, o.visit_type) for o in batch]
                request_first_visits(conn, lister_id, listed_now, clock())
        db.run_progress(conn, run["id"], len(page.origins), page.state)
    finish_listing(conn, ctx, lister_id, started, clock(), full=full)
    return listed


def _finish(
    conn: DictConnection,
    run_id: int,
    lister_id: UUID,
    full: bool,
    error: str | None,
    now: datetime,
    rng: random.Random,
) -> ListerSchedule | None:
    with conn.transaction():
        locked = db.lock_schedule(conn, lister_id, run_id)
        if locked is None:  # the run was declared lost meanwhile: its successor decides
            return None
        backoff = Backoff(LISTER_RETRY_BASE_S, LISTER_RETRY_MAX_S)
        schedule = after_run(
            locked, full=full, succeeded=error is None, now=now, backoff=backoff, rng=rng
        )
        db.finish_run(conn, run_id, error, now, schedule)
    return schedule
