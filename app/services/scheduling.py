"""One scheduling step for one visit type: pick by policy, record, hand back the orders."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import msgspec

from app.db.connection import DictConnection, in_transaction
from app.db.listings import mirror_row
from app.db.policies import candidates, first_visit_candidates
from app.db.scheduling import (
    advance_queue_position,
    mark_scheduled,
    origins_by_id,
    visit_type_configs,
)
from app.domain.placement import epoch_s
from app.domain.policies import (
    default_policies,
    plans_capacity,
    policy_of_pool,
    pool_weights,
    query_shares,
)
from app.services.allocation import (
    overload_margin_s,
    planned_lateness,
    refresh_allocation,
    schedule_drift_s,
)
from app.services.context import Context
from app.services.mirror_sync import ensure_built, place_rows
from app.services.replan import replan_slice
from queues.mirror import RebuildInProgress

log = logging.getLogger(__name__)

#: Pools ordered by next visit target: only their picks advance the queue position.
TARGET_ORDERED_POOLS = frozenset({"no_last_update", "up_to_date"})


class VisitOrder(msgspec.Struct, frozen=True):
    """What a worker needs to visit one origin: the payload of a visit message.

    A frozen msgspec Struct, not a frozen dataclass: a scheduling step builds
    one per visit, and the dataclass's ``__init__`` (one ``object.__setattr__``
    per field) cost several times as much."""

    origin_id: int
    url: str
    visit_type: str
    arguments: dict[str, Any]
    visit: int
    scheduled_at: float
    policy: str = ""
    request_id: int | None = None
    #: Duration of the origin's last visit: the lanes' prediction (seed 003).
    predicted_duration_s: float | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """The visit actor's keyword arguments."""
        return {
            "origin_id": self.origin_id,
            "url": self.url,
            "visit_type": self.visit_type,
            "arguments": self.arguments,
            "visit": self.visit,
            "scheduled_at": self.scheduled_at,
            "request_id": self.request_id,
        }


@dataclass
class StepResult:
    """What one scheduling step did."""

    visit_type: str
    free_slots: int
    orders: list[VisitOrder] = field(default_factory=list)
    cooled: int = 0
    lost: int = 0
    rebuilt: bool = False
    #: Seconds the rebuild of a missing mirror took (0 when none was needed).
    rebuild_s: float = 0.0
    #: Why nothing was picked: the mirror is missing and another process is
    #: rebuilding it, or a dry run would have rebuilt it ("" otherwise).
    waiting_for_rebuild: str = ""
    picks_by_pool: Counter[str] = field(default_factory=Counter)
    #: Under age_optimal: real time minus the target of the first planned
    #: origin left waiting after this step (None: none waits, or another spacing).
    schedule_drift_s: float | None = None


def visit_number(scheduled_at_s: float, lane_offset: int = 0) -> int:
    """A visit number for a visit sent at ``scheduled_at_s``: increasing with time,
    and distinct for a request and a recurrent visit of one origin sent in the
    same step (``lane_offset`` 1 for requests), which the journal tells apart
    by visit number."""
    return int(scheduled_at_s * 1000) * 10 + lane_offset


def free_slots(max_queue_length: int, depth: int, min_free_fraction: float) -> int:
    """How many visits to send now: none until enough slots are free to be worth a batch."""
    free = max(0, max_queue_length - depth)
    if free == 0 or free < min_free_fraction * max_queue_length:
        return 0
    return free


def schedule_step(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    slots: int,
    now: datetime,
    policies: Mapping[str, float] | None = None,
    *,
    dry_run: bool = False,
) -> StepResult:
    """Pick up to ``slots`` origins of ``visit_type`` by policy and record them as scheduled.

    Query policies first (Postgres ranks, the mirror claims), then the pools
    share the rest by weight in one atomic pop. Redis moves the picks in flight
    before Postgres records them; if this process dies in between, they return
    to their pool after the scheduled cooldown, so no visit is lost. A dry run
    says what would be picked and changes nothing.
    """
    policies = policies or default_policies(visit_type)
    result = StepResult(visit_type, slots)
    started = time.perf_counter()
    if dry_run and not ctx.mirror.is_built(visit_type):
        result.waiting_for_rebuild = (
            f"the mirror of {visit_type} is missing (Redis empty?): a real run would first "
            f"rebuild it from PostgreSQL (`revisit mirror rebuild {visit_type}`), then pick; "
            "a dry run writes nothing"
        )
        return result
    try:
        result.rebuilt = ensure_built(conn, ctx, visit_type, now)
    except RebuildInProgress as exc:
        result.waiting_for_rebuild = str(exc)
        return result
    if result.rebuilt:
        result.rebuild_s = time.perf_counter() - started
    now_s = epoch_s(now)
    picked: list[tuple[int, str, str]] = []  # id, pool, policy
    for policy, count in query_shares(policies, slots).items():
        pages = candidates(
            conn,
            policy,
            visit_type,
            count,
            rested_before=now - ctx.cooldowns.absolute,
            lost_before=now - ctx.cooldowns.scheduled,
        )
        claimed = 0
        for ranked in pages:
            for p in ctx.mirror.claim(visit_type, ranked, now_s, count - claimed, peek=dry_run):
                picked.append((p.id, p.pool, policy))
                claimed += 1
            if claimed >= count:
                break
    planned = plans_capacity(policies)
    config = visit_type_configs(conn).get(visit_type) if planned else None
    popped = ctx.mirror.pop(
        visit_type,
        slots - len(picked),
        now_s,
        ctx.cooldowns.scheduled.total_seconds(),
        pool_weights(policies),
        peek=dry_run,
        first_visit_share=ctx.tuning.first_visit_share if config else 0.0,
        overload_margin_s=overload_margin_s(config) if config else 0.0,
    )
    result.cooled, result.lost = popped.cooled, popped.lost
    picked += [(p.id, p.pool, policy_of_pool(policies, p.pool)) for p in popped.popped]
    result.picks_by_pool = Counter(pool for _, pool, _ in picked)
    if not dry_run and planned:
        ctx.mirror.count_picks(visit_type, result.picks_by_pool)
        ctx.mirror.record_lateness(visit_type, planned_lateness(popped.popped, now_s))
        multiplier = refresh_allocation(conn, ctx, visit_type, now)
        if config is not None and multiplier is not None:
            config = replace(config, age_multiplier_s2=multiplier)  # what was just stored
        if config is not None:
            replan_slice(conn, ctx, config, now)
        result.schedule_drift_s = schedule_drift_s(ctx, visit_type, now_s)
    if not picked:
        return result
    if dry_run:
        result.orders = _preview(conn, visit_type, picked, now)
        return result
    result.orders = _record(conn, ctx, visit_type, picked, now)
    if len(result.orders) < len(picked):
        log.warning("%d picked origins have no stats row", len(picked) - len(result.orders))
    return result


def _preview(
    conn: DictConnection, visit_type: str, picked: list[tuple[int, str, str]], now: datetime
) -> list[VisitOrder]:
    known = origins_by_id(conn, [origin for origin, _, _ in picked])
    return [
        VisitOrder(origin, str(known[origin]["url"]), visit_type, {}, 0, epoch_s(now), policy)
        for origin, _, policy in picked
        if origin in known
    ]


def _record(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    picked: list[tuple[int, str, str]],
    now: datetime,
) -> list[VisitOrder]:
    policy_of = {origin: policy for origin, _, policy in picked}
    by_target = {origin for origin, pool, _ in picked if pool in TARGET_ORDERED_POOLS}

    def stamp(conn: DictConnection) -> list[dict[str, Any]]:
        rows = mark_scheduled(conn, list(policy_of), now)
        # The latest target, converted once (epoch_s keeps the order of instants).
        targets = [
            r["next_visit_queue_position"]
            for r in rows
            if r["id"] in by_target and r["next_visit_queue_position"] is not None
        ]
        if targets:
            advance_queue_position(conn, visit_type, epoch_s(max(targets)))
        return rows

    # The picks are in flight in Redis already: a deadlock with a journal client
    # (this locks by id, the journal by key) must not leave them unstamped.
    rows = in_transaction(conn, stamp)
    # In flight since now, at the version the mark gave them: this wins over a
    # journal client that committed before the mark but reached Redis after the
    # pop (and moved one back to a pool); any later placement wins over this.
    place_rows(ctx, map(mirror_row, rows), now)
    now_s = epoch_s(now)
    visit = visit_number(now_s)
    return [
        VisitOrder(
            origin_id=int(r["id"]),
            url=str(r["url"]),
            visit_type=visit_type,
            arguments=dict(r["extra_loader_arguments"] or {}),
            visit=visit,
            scheduled_at=now_s,
            policy=policy_of[int(r["id"])],
            predicted_duration_s=r["last_duration_s"],
        )
        for r in rows
    ]


def first_visits_step(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    lister: dict[str, Any],
    slots: int,
    now: datetime,
) -> tuple[list[VisitOrder], bool]:
    """The first_visits_after_listing policy for one lister: its origins not
    scheduled since its last listing, least recently scheduled first. Returns
    the orders and whether none is left to send."""
    ranked = first_visit_candidates(conn, lister, visit_type, max(slots, 1))
    if not ranked:
        return [], True
    picked: list[tuple[int, str, str]] = [
        (p.id, p.pool, "first_visits_after_listing")
        for p in ctx.mirror.claim(visit_type, ranked, epoch_s(now), slots)
    ]
    return (_record(conn, ctx, visit_type, picked, now) if picked else []), False
