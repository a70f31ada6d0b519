"""The scheduler process: keeps each visit queue fed from the Redis pools."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import dramatiq
import psycopg

from actors.broker import make_broker
from actors.loop import run_every
from app.db.connection import Connections, DictConnection
from app.db.listings import first_visits_prefixes
from app.db.policies import policies_of
from app.db.scheduling import VisitTypeConfig, visit_type_configs
from app.domain.lanes import LANES
from app.domain.latency import estimated_wait_s
from app.domain.placement import POOLS
from app.domain.queue_names import API_QUEUE, first_visits_queue, lane_queue
from app.services.context import Context
from app.services.mirror_sync import LOST_VISIT_GRACE_S, return_unsent
from app.services.scheduler_step import plan_step
from app.services.scheduling import StepResult
from app.settings import Settings
from monitoring.lanes import FIRST_VISITS, lane_of
from monitoring.metrics import (
    AGE_MULTIPLIER,
    FIRST_VISIT_WAIT,
    MIRROR_ORIGINS,
    MIRROR_REBUILD_SECONDS,
    MIRROR_REBUILDS,
    QUEUE_DEPTH,
    QUEUE_ESTIMATED_WAIT,
    QUEUE_WORKERS,
    REQUESTS_SCHEDULED,
    RETURNED_ORIGINS,
    SCHEDULE_DRIFT,
    SCHEDULED_VISITS,
    SCHEDULER_BATCH_SIZE,
    SCHEDULER_ENQUEUE_SECONDS,
    SCHEDULER_FREE_SLOTS,
    SCHEDULER_POP_SECONDS,
    SCHEDULER_STEP_FAILURES,
    VISIT_TYPE_PAUSED,
)
from queues import errors as redis_errors
from queues.dramatiq_broker import (
    enqueue_many,
    queue_depth,
    return_dead_workers_messages,
    visit_message,
)
from queues.dramatiq_queues import origins_held
from queues.lease import LeaseLost, Leases, holder_name
from queues.workers import Capacity, capacities

#: Pause between two steps.
POLL_INTERVAL_S = 1.0
#: A visit type is fed by one scheduler process at a time, the holder of its Redis
#: lease; another takes over within this long after the holder dies.
LEASE_S = 10.0

log = logging.getLogger("revisit.scheduler")
CONFIG_REFRESH_S = 30.0
#: How often (of the steps' clock) each visit type's in-flight origins are
#: checked for a message the broker no longer holds (``return_unsent``).
UNSENT_CHECK_S = 60.0
#: Weight of the latest step in the pick rate behind ETAs.
RATE_SMOOTHING = 0.1
#: Errors that say a server is away, not that a visit type's step is wrong.
UNAVAILABLE: tuple[type[Exception], ...] = (psycopg.OperationalError, *redis_errors.UNAVAILABLE)


class SchedulerLoop:
    """One iteration (``step``) schedules every visit type once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ctx = Context.from_settings(settings)
        self.broker = make_broker(settings)
        # Opened on first use and again after a loss: the scheduler starts
        # before PostgreSQL is up and survives its restarts.
        self.db = Connections(settings)
        self._configs: dict[str, VisitTypeConfig] = {}
        self._policies: dict[str, dict[str, float]] = {}
        self._prefixes: list[str] = []
        self._rates: dict[str, dict[str, float]] = {}
        self._rate_at: dict[str, float] = {}
        self._configs_at = 0.0
        #: Visit types whose mirror another process is rebuilding (logged once).
        self._waiting_for_rebuild: set[str] = set()
        #: Paused visit types already logged as such.
        self._paused_logged: set[str] = set()
        #: Messages of a step whose enqueue failed with the broker unavailable, by
        #: visit type: their origins are stamped and in flight, so they are sent
        #: first at the visit type's next step (a broker restart strands no pick).
        self._unsent: dict[str, list[dramatiq.Message[Any]]] = {}
        #: When (the steps' clock, unix s) each visit type was last checked for
        #: origins in flight with no message (``_return_unsent``).
        self._unsent_checked: dict[str, float] = {}
        self.leases = Leases(
            self.ctx.mirror.client,
            settings.redis_namespace,
            LEASE_S,
            holder_name(),
            settings.mirror_shards,
        )
        self.ctx.mirror.on_rebuild_renew = self._keep_lease
        self.ctx.mirror.rebuild_renew_s = LEASE_S / 3

    def configs(self, conn: DictConnection) -> dict[str, VisitTypeConfig]:
        """Visit types (the table's, every one), their configuration and policies, and
        the listers' first-visits prefixes, re-read from Postgres every 30 s: a visit
        type added is scheduled within that time."""
        if time.monotonic() - self._configs_at > CONFIG_REFRESH_S or not self._configs:
            self._configs = visit_type_configs(conn)
            self._policies = {vt: policies_of(conn, vt) for vt in self._configs}
            self._prefixes = first_visits_prefixes(conn)
            for visit_type in self._configs:  # a rate sees the first visits (serve_journal)
                FIRST_VISIT_WAIT.labels(visit_type)
            self._configs_at = time.monotonic()
        return self._configs

    def _estimate_wait(self, visit_type: str, queue: str, lane: str, capacity: Capacity) -> None:
        """Export a queue's worker threads and estimated wait (seed 004 provisioning):
        backlog x mean recent visit duration / threads, from what the workers
        register (infinite while none serves it; unknown, so left as it was,
        until a visit's duration is known)."""
        backlog = queue_depth(self.broker, queue)
        threads, durations = capacity
        QUEUE_WORKERS.labels(visit_type, queue, lane).set(threads)
        wait = estimated_wait_s(backlog, durations, threads)
        if wait is not None:
            QUEUE_ESTIMATED_WAIT.labels(visit_type, queue, lane).set(wait)

    def known_queues(self) -> list[tuple[str, str, str]]:
        """Every Dramatiq queue revisit feeds, as (visit type, queue, lane)."""
        queues = [("api", API_QUEUE, "api")]
        for visit_type in sorted(self._configs):
            queues += [(visit_type, lane_queue(visit_type, lane), lane) for lane in LANES]
            queues += [
                (visit_type, first_visits_queue(p, visit_type), FIRST_VISITS)
                for p in self._prefixes
            ]
        return queues

    def step(self, now: datetime) -> list[StepResult]:
        """Schedule every configured visit type once at ``now``.

        A visit type whose step fails (bad weights, a database error...) is
        counted and logged; the others are scheduled all the same.
        """
        with self.db.borrow() as conn:
            return self._step(conn, now)

    def _step(self, conn: DictConnection, now: datetime) -> list[StepResult]:
        results = []
        configs = self.configs(conn)
        queues = self.known_queues()
        capacity = capacities(
            self.ctx.redis, self.settings.redis_namespace, [q for _, q, _ in queues]
        )
        for visit_type, queue, lane in queues:
            return_dead_workers_messages(self.broker, queue)
            if visit_type != "api":
                self._estimate_wait(visit_type, queue, lane, capacity[queue])
        for visit_type, config in sorted(configs.items()):
            VISIT_TYPE_PAUSED.labels(visit_type).set(0 if config.enabled else 1)
            if not config.enabled:
                self._paused(visit_type)
                continue
            self._paused_logged.discard(visit_type)
            SCHEDULER_STEP_FAILURES.labels(visit_type).inc(0)
            MIRROR_REBUILDS.labels(visit_type).inc(0)
            MIRROR_REBUILD_SECONDS.labels(visit_type).inc(0)
            if not self._hold_lease(visit_type):
                continue
            try:
                results.append(self.visit_type_step(conn, config, now, capacity))
            except LeaseLost as exc:
                log.warning("%s: lease lost before the pop, nothing sent (%s)", visit_type, exc)
            except UNAVAILABLE:
                raise  # the run loop reconnects and retries the whole step
            except Exception:
                SCHEDULER_STEP_FAILURES.labels(visit_type).inc()
                log.exception("%s: scheduling step failed; the other visit types go on", visit_type)
                conn.rollback()
        return results

    def _paused(self, visit_type: str) -> None:
        """Export a paused visit type's origins, and say once why none is sent."""
        for place, size in self.ctx.mirror.sizes(visit_type).items():
            MIRROR_ORIGINS.labels(visit_type, place).set(size)
        if visit_type not in self._paused_logged:
            self._paused_logged.add(visit_type)
            log.warning(
                "%s: paused, no visit sent (created by a listing; once workers with its "
                "loader run: revisit visit-type set %s --enable)",
                visit_type,
                visit_type,
            )

    def _hold_lease(self, visit_type: str) -> bool:
        """Take or renew the visit type's lease; its pops are then fenced with the
        token (another scheduler process holding it: skip the visit type)."""
        token = self.leases.hold(visit_type)
        if token is None:
            self.ctx.mirror.fences.pop(visit_type, None)
            return False
        self.ctx.mirror.fences[visit_type] = token
        return True

    def _keep_lease(self, visit_type: str) -> None:
        """Renew the lease of ``visit_type`` while this process rebuilds its mirror
        (minutes at archive scale): the rebuild calls this every third of the
        lease from its own thread, whatever phase it is in, until it has made
        no progress for ``queues.mirror.REBUILD_MARKER_TTL_S`` (then it lapses for
        another scheduler). A lease taken again with a newer token is not
        adopted (the step read its queue depths under the old one): its pop is
        refused."""
        token = self.ctx.mirror.fences.get(visit_type)
        if token is None:
            return
        held = self.leases.hold(visit_type)
        if held != token:
            log.warning(
                "%s: the lease lapsed during a rebuild (%s); its pops are refused",
                visit_type,
                "taken again with a newer token" if held else "held by another",
            )

    def visit_type_step(
        self,
        conn: DictConnection,
        config: VisitTypeConfig,
        now: datetime,
        capacity: Mapping[str, Capacity],
    ) -> StepResult:
        """Plan one visit type's step (``app.services.scheduler_step``), send it, export it;
        ``capacity``: the step's read of the worker registry."""
        visit_type = config.name
        policies = self._policies.get(visit_type)
        unsent = self._unsent.pop(visit_type, [])
        if unsent:
            self._send(visit_type, unsent)
            log.info("%s: sent the %d visits the broker refused before", visit_type, len(unsent))

        def served(queue: str) -> bool:
            return capacity[queue].threads > 0

        with SCHEDULER_POP_SECONDS.labels(visit_type).time():
            plan = plan_step(conn, self.ctx, config, self._depth, now, policies, served)
        messages = [
            visit_message(s.queue, s.order, s.lane, s.time_limit_s, s.limits) for s in plan.sends
        ]
        with SCHEDULER_ENQUEUE_SECONDS.labels(visit_type).time():
            self._send(visit_type, messages)
        for queue, depth in plan.depths.items():
            sent = [s for s in plan.sends if s.queue == queue]
            lane = sent[0].lane if sent else lane_of(queue, visit_type)
            for policy, count in Counter(s.order.policy for s in sent).items():
                SCHEDULED_VISITS.labels(visit_type, policy, lane).inc(count)
            SCHEDULER_BATCH_SIZE.labels(visit_type, lane).observe(len(sent))
            QUEUE_DEPTH.labels(visit_type, queue, lane).set(depth + len(sent))
        REQUESTS_SCHEDULED.labels(visit_type).inc(plan.count("priority"))
        self._return_unsent(conn, visit_type, now)
        if config.age_multiplier_s2 is not None and math.isfinite(config.age_multiplier_s2):
            AGE_MULTIPLIER.labels(visit_type).set(config.age_multiplier_s2)
        self._observe(plan.recurrent)
        return plan.recurrent

    def _return_unsent(self, conn: DictConnection, visit_type: str, now: datetime) -> None:
        """Every ``UNSENT_CHECK_S``, return early the origins whose message a dead
        scheduler never sent or a broker restart lost (``return_unsent``)."""
        if now.timestamp() - self._unsent_checked.get(visit_type, -math.inf) < UNSENT_CHECK_S:
            return
        self._unsent_checked[visit_type] = now.timestamp()
        queues = [q for vt, q, _ in self.known_queues() if vt == visit_type]
        held = origins_held(self.broker.client, queues)
        returned = return_unsent(conn, self.ctx, visit_type, held, now)
        RETURNED_ORIGINS.labels(visit_type, "unsent").inc(returned)
        if returned:
            log.warning(
                "%s: %d origins in flight have no message in the broker (a scheduler died "
                "before sending them, or the broker lost them); they return to their pools "
                "within %.0f s",
                visit_type,
                returned,
                LOST_VISIT_GRACE_S,
            )

    def _send(self, visit_type: str, messages: Sequence[dramatiq.Message[Any]]) -> None:
        """Enqueue ``messages``; kept for the visit type's next step if the broker is
        unavailable (part of them may have been stored: those few are sent twice, and
        the second visit of a busy origin waits or is dropped by the worker)."""
        try:
            enqueue_many(self.broker, messages)
        except redis_errors.UNAVAILABLE:
            self._unsent[visit_type] = list(messages)
            log.warning(
                "%s: the broker refused %d visits; sent at the next step", visit_type, len(messages)
            )
            raise

    def _depth(self, queue: str) -> int:
        self.broker.declare_queue(queue)
        return queue_depth(self.broker, queue)

    def _observe(self, result: StepResult) -> None:
        vt = result.visit_type
        self._update_rates(result)
        SCHEDULER_FREE_SLOTS.labels(vt).set(result.free_slots)
        if result.schedule_drift_s is not None:
            SCHEDULE_DRIFT.labels(vt).set(result.schedule_drift_s)
        RETURNED_ORIGINS.labels(vt, "cooled").inc(result.cooled)
        RETURNED_ORIGINS.labels(vt, "lost").inc(result.lost)
        waiting = result.waiting_for_rebuild
        if waiting and vt not in self._waiting_for_rebuild:
            log.info("%s: not scheduled until the mirror is rebuilt: %s", vt, waiting)
        if waiting:
            self._waiting_for_rebuild.add(vt)
        else:
            self._waiting_for_rebuild.discard(vt)
        if result.rebuilt:
            MIRROR_REBUILDS.labels(vt).inc()
            MIRROR_REBUILD_SECONDS.labels(vt).set(result.rebuild_s)
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
                f", mirror rebuilt in {result.rebuild_s:.1f} s" if result.rebuilt else "",
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
        """Step until ``stop`` is set, pausing between steps.

        A step that fails because PostgreSQL or Redis is unavailable is retried
        with bounded backoff (``actors.loop``), on a new connection if it was
        lost; the process never exits for it.
        """
        try:
            run_every(self.step, POLL_INTERVAL_S, stop, log, "scheduler step")
        finally:
            with contextlib.suppress(redis_errors.RedisError):
                self.leases.release_all()
            self.db.close()
