"""What the scheduler sends for one visit type in one step: the one copy of the
capacity arithmetic, shared by the scheduler process and the simulator.

Given how deep each queue is, a step

1. makes pending again the requests sent that have no final status by their
   deadline (``requests_past_deadline``, counted in the result's ``lost``),
   then sends pending one-shot requests, best first, to the priority queue
   (they have their own workers: a flood of requests cannot starve recurrent
   visits, and the recurrent backlog never delays them);
2. serves ``first_visits_after_listing`` for each lister with a first-visits
   queue;
3. fills the express and slow lanes with recurrent visits picked by the visit
   type's policies (``schedule_step``): both lanes' free slots make one batch,
   predicted-slow visits go to the slow lane, the others fill the express
   lane shortest first, and the slow lane takes the rest. While no worker
   serves the slow lane (``served``; an express pool alone), the batch is the
   express lane's room and all of it goes there: what does not fit waits in
   its pool rather than in a queue no one reads (``lane_sends``, which
   ``revisit schedule`` shares).

``max_queue_length`` (visit_types) bounds every queue of a visit type: the
messages it holds, queued or running. Its ``time_limit``, ``num_retries`` and
``retry_delay`` travel with each message (``VisitLimits``). Nothing here talks to the broker: the
caller reads the depths (``depth(queue)``), sends the returned ``Send`` list
and exports what it likes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from app.db.connection import DictConnection
from app.db.listings import known_visit_types
from app.db.policies import first_visit_candidates, first_visits_done, listers_with_first_visits_due
from app.db.scheduling import VisitTypeConfig
from app.domain.lanes import assign_lanes
from app.domain.placement import epoch_s
from app.domain.queue_names import (
    FIRST_VISITS,
    first_visits_queue,
    priority_queue,
    slow_queue,
    visit_queue,
)
from app.loaders.base import publishes_statuses
from app.services.context import Context
from app.services.requests import requests_past_deadline, take_pending
from app.services.scheduling import (
    StepResult,
    VisitOrder,
    first_visits_step,
    free_slots,
    schedule_step,
)
from app.services.scheduling import visit_number as visit_number_of
from app.settings import Settings

#: Share of a visit type's queue room that must be free before a step fills it.
MIN_FREE_FRACTION = 0.1


@dataclass(frozen=True)
class VisitLimits:
    """How the visits of one visit type run: its visit_types row."""

    visit_time_limit_s: float
    """Longest a visit may run (the slow lane's limit; an express visit that
    outlasts the express lane is re-sent with it)."""
    max_retries: int
    retry_delay_s: float


def limits_of(config: VisitTypeConfig) -> VisitLimits:
    """The limits of ``config``'s visit type: its columns."""
    return VisitLimits(config.time_limit_s, config.num_retries, config.retry_delay_s)


@dataclass(frozen=True)
class Send:
    """One visit to enqueue: where, in which lane, with which time limit and retries."""

    queue: str
    lane: str
    order: VisitOrder
    time_limit_s: float
    limits: VisitLimits


@dataclass
class StepPlan:
    """Everything one step of one visit type sends, and what the pop did."""

    visit_type: str
    recurrent: StepResult
    sends: list[Send] = field(default_factory=list)
    depths: dict[str, int] = field(default_factory=dict)
    """Depth of each queue read by the step, before its sends."""

    def count(self, lane: str) -> int:
        """How many visits this step sends to ``lane``."""
        return sum(1 for s in self.sends if s.lane == lane)


def plan_step(
    conn: DictConnection,
    ctx: Context,
    config: VisitTypeConfig,
    depth: Callable[[str], int],
    now: datetime,
    policies: Mapping[str, float] | None = None,
    served: Callable[[str], bool] | None = None,
) -> StepPlan:
    """Decide what to send for ``config.name`` at ``now`` (see the module docstring);
    ``served(queue)``: whether a worker serves that queue now (None: every one is)."""
    visit_type = config.name
    depths: dict[str, int] = {}

    def read(queue: str) -> int:
        depths[queue] = depth(queue)
        return depths[queue]

    step = _Step(conn, ctx, config, read, now, limits_of(config))
    # Requests presumed lost are sent again first, counted with the lost visits.
    lost = requests_past_deadline(conn, ctx, visit_type, step.limits.visit_time_limit_s, now)
    sends = _requests(step) + _first_visits(step)
    lane_sends, result = _lanes(step, policies, served or (lambda queue: True))
    result.lost += len(lost)
    return StepPlan(visit_type, result, sends + lane_sends, depths)


@dataclass(frozen=True)
class _Step:
    """What every part of one step works with."""

    conn: DictConnection
    ctx: Context
    config: VisitTypeConfig
    depth: Callable[[str], int]
    now: datetime
    limits: VisitLimits


def _requests(step: _Step) -> list[Send]:
    conn, config, depth, now = step.conn, step.config, step.depth, step.now
    queue = priority_queue(config.name)
    slots = max(0, config.max_queue_length - depth(queue))
    now_s = epoch_s(now)
    limit = step.limits.visit_time_limit_s
    visit = visit_number_of(now_s, lane_offset=1)
    # The archive's loaders number their visits themselves: a request's visit is
    # then the first of its origin created after it was sent.
    own_visit = visit if publishes_statuses(config.loader or config.name) else None
    return [
        Send(
            queue,
            "priority",
            VisitOrder(
                origin_id=0,
                url=r.url,
                visit_type=config.name,
                arguments=r.arguments,
                visit=visit,
                scheduled_at=now_s,
                policy="request",
                request_id=r.id,
            ),
            limit,
            step.limits,
        )
        for r in take_pending(conn, step.ctx, config.name, slots, now, own_visit, limit)
    ]


def _first_visits(step: _Step) -> list[Send]:
    conn, ctx, config, depth, now = step.conn, step.ctx, step.config, step.depth, step.now
    sends: list[Send] = []
    limit = step.limits.visit_time_limit_s
    for lister in listers_with_first_visits_due(conn):
        queue = first_visits_queue(lister["first_visits_queue_prefix"], config.name)
        slots = max(0, config.max_queue_length - depth(queue))
        orders, done = first_visits_step(conn, ctx, config.name, lister, slots, now)
        sends += [Send(queue, FIRST_VISITS, o, limit, step.limits) for o in orders]
        if done and all(
            not first_visit_candidates(conn, lister, vt, 1) for vt in known_visit_types(conn)
        ):
            first_visits_done(conn, lister["id"], now)
    return sends


def _lanes(
    step: _Step, policies: Mapping[str, float] | None, served: Callable[[str], bool]
) -> tuple[list[Send], StepResult]:
    conn, ctx, config, depth, now = step.conn, step.ctx, step.config, step.depth, step.now
    express_q, slow_q = visit_queue(config.name), slow_queue(config.name)
    bound = config.max_queue_length
    express_free = max(0, bound - depth(express_q))
    slow_served = served(slow_q)
    slow_free = max(0, bound - depth(slow_q)) if slow_served else 0
    slots = free_slots(2 * bound, 2 * bound - express_free - slow_free, MIN_FREE_FRACTION)
    result = schedule_step(conn, ctx, config.name, slots, now, policies)
    lanes = lane_sends(
        ctx.settings, config.name, step.limits, result.orders, express_free, slow_served
    )
    return lanes, result


def lane_sends(
    settings: Settings,
    visit_type: str,
    limits: VisitLimits,
    orders: list[VisitOrder],
    express_room: int,
    slow_served: bool,
) -> list[Send]:
    """Split ``orders`` between the express and slow lanes (``assign_lanes``), all to
    the express lane while no worker serves the slow lane (``slow_served``)."""
    limit_s = settings.express_time_limit_s
    if slow_served:
        express, slow = assign_lanes(orders, _predicted, express_room, limit_s)
    else:
        express, slow = orders, []
    sends = [Send(visit_queue(visit_type), "express", o, limit_s, limits) for o in express]
    slow_q = slow_queue(visit_type)
    return sends + [Send(slow_q, "slow", o, limits.visit_time_limit_s, limits) for o in slow]


def _predicted(order: VisitOrder) -> float | None:
    return order.predicted_duration_s
