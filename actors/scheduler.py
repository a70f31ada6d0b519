"""The scheduler process: keeps each visit queue fed from the Redis pools."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import dramatiq

from actors.broker import enqueue_many, make_broker, queue_depth
from app.context import Context
from app.db.connection import connect
from app.db.policies import (
    first_visit_candidates,
    first_visits_done,
    listers_with_first_visits_due,
    policies_of,
)
from app.db.scheduling import VisitTypeConfig, visit_type_configs
from app.domain.placement import POOLS, epoch_s
from app.queue_names import first_visits_queue, priority_queue, visit_queue
from app.requests import take_pending
from app.scheduling import (
    StepResult,
    VisitOrder,
    first_visits_step,
    free_slots,
    schedule_step,
)
from app.settings import Settings
from monitoring.lanes import FIRST_VISITS, RECURRENT
from monitoring.metrics import (
    MIRROR_ORIGINS,
    REQUESTS_SCHEDULED,
    RETURNED_ORIGINS,
    SCHEDULED_VISITS,
    SCHEDULER_ENQUEUE_SECONDS,
    SCHEDULER_FREE_SLOTS,
    SCHEDULER_POP_SECONDS,
)
from monitoring.queue_wait import QueueWatch

log = logging.getLogger("revisit.scheduler")
CONFIG_REFRESH_S = 30.0
#: Weight of the latest step in the pick rate behind ETAs.
RATE_SMOOTHING = 0.1


def visit_message(queue: str, order: VisitOrder) -> dramatiq.Message[Any]:
    """The Dramatiq message of one visit (actor ``visit``)."""
    return dramatiq.Message(
        queue_name=queue, actor_name="visit", args=(), kwargs=order.as_kwargs(), options={}
    )


class SchedulerLoop:
    """One iteration (``step``) schedules every visit type once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ctx = Context.from_settings(settings)
        self.broker = make_broker(settings)
        self.conn = connect(settings)
        self._configs: dict[str, VisitTypeConfig] = {}
        self._policies: dict[str, dict[str, float]] = {}
        self._rates: dict[str, dict[str, float]] = {}
        self._rate_at: dict[str, float] = {}
        self._configs_at = 0.0
        self.queues = QueueWatch()

    def configs(self) -> dict[str, VisitTypeConfig]:
        """Visit type configuration and policies, re-read from Postgres every 30 s."""
        if time.monotonic() - self._configs_at > CONFIG_REFRESH_S or not self._configs:
            self._configs = visit_type_configs(self.conn)
            self._policies = {vt: policies_of(self.conn, vt) for vt in self._configs}
            self._configs_at = time.monotonic()
        return self._configs

    def requests_step(self, visit_type: str, config: VisitTypeConfig, now: datetime) -> int:
        """Send pending one-shot requests, best first, to the visit type's priority queue.

        Requests have their own queue and workers, so they never wait behind
        the recurrent backlog, and recurrent visits keep their own workers: a
        flood of requests cannot starve them.
        """
        queue = priority_queue(visit_type)
        depth = queue_depth(self.broker, queue)
        slots = max(0, config.max_queue_length - depth)
        taken = take_pending(self.conn, visit_type, slots, now)
        now_s = epoch_s(now)
        messages: list[dramatiq.Message[Any]] = [
            visit_message(
                queue,
                VisitOrder(
                    origin_id=0,
                    url=r.url,
                    visit_type=visit_type,
                    arguments=r.arguments,
                    visit=int(now_s * 1000),
                    scheduled_at=now_s,
                    policy="request",
                    request_id=r.id,
                ),
            )
            for r in taken
        ]
        enqueue_many(self.broker, messages)
        REQUESTS_SCHEDULED.labels(visit_type).inc(len(messages))
        SCHEDULED_VISITS.labels(visit_type, "request", "priority").inc(len(messages))
        self.queues.observe(visit_type, queue, "priority", depth, len(messages), time.monotonic())
        return len(messages)

    def step(self, now: datetime) -> list[StepResult]:
        """Schedule every configured visit type once at ``now``."""
        results = []
        configs = self.configs()
        for visit_type in self.settings.visit_types:
            config = configs.get(visit_type)
            if config is None:
                continue
            self.requests_step(visit_type, config, now)
            self.first_visits_step(visit_type, config, now)
            queue = visit_queue(visit_type)
            depth = queue_depth(self.broker, queue)
            slots = free_slots(
                config.max_queue_length, depth, self.settings.scheduler_min_free_fraction
            )
            policies = self._policies.get(visit_type)
            with SCHEDULER_POP_SECONDS.labels(visit_type).time():
                result = schedule_step(self.conn, self.ctx, visit_type, slots, now, policies)
            with SCHEDULER_ENQUEUE_SECONDS.labels(visit_type).time():
                enqueue_many(self.broker, [visit_message(queue, o) for o in result.orders])
            self._observe(result)
            self.queues.observe(
                visit_type, queue, RECURRENT, depth, len(result.orders), time.monotonic()
            )
            results.append(result)
        return results

    def first_visits_step(self, visit_type: str, config: VisitTypeConfig, now: datetime) -> int:
        """Serve first_visits_after_listing for each lister with a first-visits queue."""
        sent = 0
        for lister in listers_with_first_visits_due(self.conn):
            queue = first_visits_queue(lister["first_visits_queue_prefix"], visit_type)
            self.broker.declare_queue(queue)
            depth = queue_depth(self.broker, queue)
            slots = max(0, config.max_queue_length - depth)
            orders, done = first_visits_step(self.conn, self.ctx, visit_type, lister, slots, now)
            enqueue_many(self.broker, [visit_message(queue, o) for o in orders])
            for policy, count in Counter(o.policy for o in orders).items():
                SCHEDULED_VISITS.labels(visit_type, policy, FIRST_VISITS).inc(count)
            self.queues.observe(
                visit_type, queue, FIRST_VISITS, depth, len(orders), time.monotonic()
            )
            sent += len(orders)
            if done and all(
                not first_visit_candidates(self.conn, lister, vt, 1)
                for vt in self.settings.visit_types
            ):
                first_visits_done(self.conn, lister["id"], now)
        return sent

    def _observe(self, result: StepResult) -> None:
        vt = result.visit_type
        self._update_rates(result)
        SCHEDULER_FREE_SLOTS.labels(vt).set(result.free_slots)
        for policy, count in Counter(o.policy for o in result.orders).items():
            SCHEDULED_VISITS.labels(vt, policy, RECURRENT).inc(count)
        RETURNED_ORIGINS.labels(vt, "cooled").inc(result.cooled)
        RETURNED_ORIGINS.labels(vt, "lost").inc(result.lost)
        for place, size in self.ctx.mirror.sizes(vt).items():
            MIRROR_ORIGINS.labels(vt, place).set(size)
        if result.orders or result.lost or result.rebuilt:
            log.info(
                "%s: scheduled %d (free %d), %d back from cooldown, %d lost visits returned%s",
                vt,
                len(result.orders),
                result.free_slots,
                result.cooled,
                result.lost,
                ", mirror rebuilt" if result.rebuilt else "",
            )

    def _update_rates(self, result: StepResult) -> None:
        """Exponentially weighted pick rate of each pool, kept in the mirror for ETAs."""
        vt = result.visit_type
        now = time.monotonic()
        last = self._rate_at.get(vt)
        self._rate_at[vt] = now
        if last is None or now <= last:
            return
        rates = self._rates.setdefault(vt, dict.fromkeys(POOLS, 0.0))
        for pool in POOLS:
            current = result.picks_by_pool.get(pool, 0) / (now - last)
            rates[pool] = RATE_SMOOTHING * current + (1 - RATE_SMOOTHING) * rates[pool]
        self.ctx.mirror.record_pick_rates(vt, rates)

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop`` is set, pausing between steps."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.step(datetime.now(tz=UTC))
            except Exception:
                log.exception("scheduler step failed; retrying")
            elapsed = time.monotonic() - started
            stop.wait(max(0.0, self.settings.scheduler_poll_interval_s - elapsed))
