"""Keeping age-optimal targets in step with the multiplier: one slice of a sweep.

The journal plans an origin's next visit with the multiplier μ of that moment
(``app.domain.visit_stats``). μ moves as workers come and go and as rates are
learned, and targets planned before the first μ was measured come from the
ladder: left alone, such a target holds its origin back for weeks (a fast
changer planned at a month sits stale for a month). Each scheduler step of an
age_optimal visit type re-plans the next ``replan_batch`` rows after a cursor
kept in the mirror's meta hash, wrapping round at the end of the table, so
the whole table is re-planned every rows / replan_batch steps; a new sweep
starts only once μ has moved since the last one began. A row whose
visit result is folded meanwhile keeps the journal's plan (the update names
the last final date it read), and origins in flight stay where they are.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from app.db.connection import DictConnection, in_transaction
from app.db.replan import PlannedTarget, set_planned_targets, stats_after
from app.db.scheduling import VisitTypeConfig
from app.domain.visit_stats import replanned_target
from app.services.context import Context
from app.services.journal import FUDGE, stats_policy
from app.services.mirror_sync import place_rows

#: A target that moves less than this is left alone (no write, no Redis move).
TOLERANCE = timedelta(minutes=1)
#: A sweep starts only once μ has moved by more than this (in log) since the last
#: one: in a steady state the journal's own plans are current, and the sweep idles.
STILL = 0.05


def _still(multiplier: float, swept_with: float) -> bool:
    """Whether μ is about where the last sweep left it (an infinite μ, capacity
    short of the floor, is still only next to another infinite one)."""
    if not (math.isfinite(multiplier) and math.isfinite(swept_with)):
        return multiplier == swept_with
    if multiplier <= 0 or swept_with <= 0:
        return multiplier == swept_with
    return abs(math.log(multiplier / swept_with)) < STILL


def _moved(old: datetime | None, new: datetime) -> bool:
    return old is None or abs(new - old) > TOLERANCE


def _moved_delay(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old != new
    return abs(new - old) > TOLERANCE.total_seconds()


def replan_slice(
    conn: DictConnection,
    ctx: Context,
    config: VisitTypeConfig,
    now: datetime,
) -> int:
    """Re-plan the next slice of the sweep of ``config``'s visit type; return how
    many targets moved."""
    limit = ctx.tuning.replan_batch
    policy = stats_policy(config, ctx)
    if limit <= 0 or policy.spacing != "age_optimal" or policy.age_multiplier_s2 is None:
        return 0
    multiplier = policy.age_multiplier_s2
    after, swept_with = ctx.mirror.replan_state(config.name)
    if after == 0 and swept_with is not None and _still(multiplier, swept_with):
        return 0  # the last sweep planned with about this μ: nothing to correct
    rows = stats_after(conn, config.name, after, limit)
    moves: list[PlannedTarget] = []
    for origin_id, stats in rows:
        planned = replanned_target(stats, policy, FUDGE)
        if planned is None:
            continue
        target, delay = planned
        if _moved(stats.next_visit_queue_position, target) or _moved_delay(
            stats.reported_change_delay_s, delay
        ):
            moves.append((origin_id, target, stats.tally.last_final_date, delay))
    # Between a scheduling step's pop and its bookkeeping: a deadlock with a
    # journal client is written again, never left to strand the step's picks.
    written = in_transaction(conn, lambda c: set_planned_targets(c, moves))
    place_rows(ctx, written, now, keep_inflight=True)
    ctx.mirror.set_replan_state(config.name, rows[-1][0] if len(rows) == limit else 0, multiplier)
    return len(written)
