"""Where an origin belongs in the scheduling mirror, derived from its stats.

Every enabled origin is in exactly one place: one of the four pools (ready to
be picked), ``inflight`` (sent to a worker, no result yet) or ``cooling``
(visited recently, resting). The pools are those of seed 000, which the
policies of seed 002 select from:

| pool               | origins                                    | ordered by (score)        |
|--------------------|--------------------------------------------|---------------------------|
| ``never_visited``  | last_update known; no successful visit | last_update, oldest first, |
|                    |                                            | at most its target (**)   |
| ``lagging``        | visited; the forge reports a later change  | lag, largest first (-lag); |
|                    |                                            | age_optimal: due time (*) |
| ``no_last_update`` | the forge reports no last_update           | next visit target         |
| ``up_to_date``     | visited after the forge's last change      | next visit target         |

(*) Under age_optimal a reported change is due a delay after the first change
the archive misses (``change_due_s``): a date, where lag scores are <= 0. When
the workers cannot follow every reported change, the delay counts from the
latest reported change and the target does not bring it forward (quiet
origins first, ``app.domain.allocation``).

(**) A new origin's target is when it was listed (or the queue position, if
earlier), which a listing does not move: a never visited origin whose forge
reports a newer change keeps its place, where its latest last_update would
put it behind every origin listed after it, so that an active new origin
(the one falling behind fastest) could wait for ever.

This function is the single definition of that derivation; the listing
import, the journal client and the mirror rebuild all use it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

import msgspec

from app.domain.allocation import counts_from_latest_change
from app.domain.cooldown import Cooldowns, eligible_at, in_flight_since

Where = Literal["pool", "inflight", "cooling", "absent"]
PoolName = Literal["never_visited", "lagging", "no_last_update", "up_to_date"]
POOLS: tuple[PoolName, ...] = ("never_visited", "lagging", "no_last_update", "up_to_date")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY_S = 86400.0


class MirrorRow(msgspec.Struct, frozen=True, gc=False):
    """The columns of origin_visit_stats that decide an origin's place.

    A frozen msgspec Struct, not a frozen dataclass: one is built per origin
    written by a journal batch, a listing batch or a rebuild, and a frozen
    dataclass set each field with ``object.__setattr__`` (``msgspec.structs``
    has ``fields`` and ``replace`` for it)."""

    id: int
    visit_type: str
    next_visit_queue_position: datetime | None
    last_visit_status: str | None
    last_final_date: datetime | None
    last_scheduled: datetime | None
    last_successful: datetime | None
    last_update: datetime | None
    never_succeeded: bool
    enabled: bool
    #: origin_visit_stats.version of the row read (0: unknown, placed unconditionally).
    version: int = 0
    #: The learned change rate (per day; None: not learned yet).
    change_rate_per_day: float | None = None
    #: age_optimal: how long after its first missed change a reported change is
    #: due (``app.domain.visit_stats.change_delay_s``; None: order by lag).
    reported_change_delay_s: float | None = None
    #: Failed or not_found visits since the last successful one: a failed origin
    #: rests longer the more it failed in a row (``Cooldowns.failed_rest``).
    failures_in_a_row: int = 0


class Placement(msgspec.Struct, frozen=True, gc=False):
    """An origin's place and its score there; ``pool``/``pool_score`` say where it
    goes when it leaves in flight or cooling.

    A frozen msgspec Struct, as ``MirrorRow``: one is built per origin placed
    (``msgspec.structs.replace`` changes one)."""

    id: int
    where: Where
    score: float
    pool: PoolName
    pool_score: float
    #: The stats row's version it derives from: the mirror keeps the highest (0: unknown).
    version: int = 0


def epoch_s(moment: datetime | None) -> float:
    """Seconds since the Unix epoch (0 for ``None``): the score unit of the mirror."""
    return 0.0 if moment is None else (moment - EPOCH).total_seconds()


def pool_of(row: MirrorRow) -> tuple[PoolName, float]:
    """The pool an eligible origin waits in, and its score there."""
    target = epoch_s(row.next_visit_queue_position)
    if row.last_update is None:
        return "no_last_update", target
    if row.never_succeeded or row.last_successful is None:
        # Its whole history waits, from before its first listing: a newer
        # last_update must not move it behind origins listed after it.
        if row.next_visit_queue_position is None:
            return "never_visited", epoch_s(row.last_update)
        return "never_visited", min(epoch_s(row.last_update), target)
    if row.last_update > row.last_successful:
        delay = row.reported_change_delay_s
        if delay is not None and counts_from_latest_change(delay):
            # Quiet origins first: an origin that keeps changing waits until it
            # has been quiet for the delay, whatever its target (its floor).
            return "lagging", epoch_s(row.last_update) - delay
        if delay is not None:
            due = change_due_s(row, row.last_update, row.last_successful)
            # never later than the target: the floor, or a failed floor visit's retry
            return "lagging", due if row.next_visit_queue_position is None else min(due, target)
        return "lagging", epoch_s(row.last_successful) - epoch_s(row.last_update)
    return "up_to_date", target


def change_due_s(row: MirrorRow, last_update: datetime, last_successful: datetime) -> float:
    """When a reported change is due (age_optimal's lagging score, a date: > 0,
    where the lag order's scores are <= 0): the delay after the first change
    the archive misses. That change is the reported one, or, for a fast
    changer, the one expected a mean wait (1/rate) after the last successful
    visit if that comes first (its age counts from there)."""
    first = epoch_s(last_update)
    rate = row.change_rate_per_day
    if rate is not None and rate > 0:
        first = min(first, epoch_s(last_successful) + DAY_S / rate)
    return first + (row.reported_change_delay_s or 0.0)


def at_risk(row: MirrorRow) -> bool:
    """Whether an age_optimal origin's last visit failed at or past its floor, so
    that it risks going longer than max_interval without a successful visit: the
    journal then sets its target before the failure (``visit_stats.next_target``),
    where any other failed visit's target is after it (a retry)."""
    return (
        row.last_visit_status == "failed"
        and row.last_successful is not None
        and row.reported_change_delay_s is not None
        and row.next_visit_queue_position is not None
        and row.last_final_date is not None
        and row.next_visit_queue_position < row.last_final_date
    )


def change_interval(row: MirrorRow) -> timedelta | None:
    """age_optimal: the mean time between the origin's changes, from its learned
    rate, which shortens a failed visit's rest (``Cooldowns.failed_rest``);
    None under another spacing or before a rate is learned."""
    rate = row.change_rate_per_day
    if row.reported_change_delay_s is None or rate is None or rate <= 0:
        return None
    return timedelta(days=1 / max(rate, 1e-6))  # (a million days: timedelta's range)


def sent_since_final(row: MirrorRow) -> bool:
    """Whether the origin was sent to a worker after its last final status (a
    status at the very instant of the send is an earlier visit's, as for
    ``in_flight_since``)."""
    if row.last_scheduled is None:
        return False
    return row.last_final_date is None or row.last_final_date <= row.last_scheduled


def place(row: MirrorRow, now: datetime, cooldowns: Cooldowns) -> Placement:
    """Decide where ``row`` belongs at ``now``.

    An origin rests (``cooling``) after its last final status, unless it was
    sent since: a send ends the rest (a request sends a resting origin), so
    once that visit is presumed lost (``in_flight_since``) the origin returns
    to its pool, never to the rest its flight overrode. The mirror parks an
    origin in flight with its pool alone, and its pop returns it there. A
    visit stopped with no final status (aborted, past its request's deadline)
    is taken as never sent (``release_request_origins``): the origin resumes
    its rest.
    """
    pool, pool_score = pool_of(row)
    if not row.enabled:
        return Placement(row.id, "absent", 0.0, pool, pool_score, row.version)
    since = in_flight_since(row.last_scheduled, row.last_final_date, now, cooldowns)
    if since is not None:
        return Placement(row.id, "inflight", epoch_s(since), pool, pool_score, row.version)
    if sent_since_final(row):
        # Its visit was presumed lost: the send had ended its rest.
        return Placement(row.id, "pool", pool_score, pool, pool_score, row.version)
    rest_until: datetime | None
    if row.failures_in_a_row <= cooldowns.at_risk_retries and at_risk(row):
        # undoubled, the absolute cooldown: twice a day until the failures that
        # disable the origin, whose count its next listing resets
        assert row.last_final_date is not None  # at_risk checked it
        rest_until = row.last_final_date + cooldowns.absolute
    else:
        interval = change_interval(row) if row.last_visit_status == "failed" else None
        rest_until = eligible_at(
            row.last_final_date, row.last_visit_status, cooldowns, row.failures_in_a_row, interval
        )
    if rest_until is not None and rest_until > now:
        return Placement(row.id, "cooling", epoch_s(rest_until), pool, pool_score, row.version)
    return Placement(row.id, "pool", pool_score, pool, pool_score, row.version)
