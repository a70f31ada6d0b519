"""The simulation loop: revisit's own listing, scheduling and journal code, with
simulated forges, listers and loaders, under a simulated clock.

Each tick of ``step_minutes`` at simulated time t:

1. the journal events of visits that started or ended by t are applied in one
   batch (``app.services.journal.apply_events_batch``, as the journal client does);
2. listers due at t record a full listing (``app.services.listing``), unless their
   forge is down;
3. save-code-now requests that arrived are created (``app.services.requests``);
4. the archive is measured against the forges;
5. for each visit type, the scheduler fills the free slots of the request
   queue (``take_pending``) and of the recurrent queue (``plan_step``:
   the policies, the Lua pops and the Postgres stamps of production);
6. the simulated workers run the queued visits until t + step, each visit's
   outcome and duration drawn from the hidden world (a visit during its
   forge's outage fails; a large origin's visits take longer). Whenever a
   visit's end frees enough of a queue's slots for production's scheduler to
   refill it (``MIN_FREE_FRACTION``), the journal events due by then are
   applied and the scheduler steps for that visit type at that instant:
   production's scheduler steps every second, so its workers never wait for
   a step.

The only clock is the ``now`` passed to those functions. No policy is
re-implemented here: which origin is visited when is decided by the production
code alone.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.db.connection import DictConnection
from app.db.listings import known_visit_types, register_lister
from app.db.policies import policies_of, set_policies
from app.db.scheduling import set_max_queue_length, visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.domain.queue_names import priority_queue, visit_queue
from app.domain.visit_stats import FLOOR_MARGIN
from app.inputs.api import RequestVisit
from app.inputs.listing import ListedOriginIn
from app.services.context import TUNING_KNOBS, Context, Tuning
from app.services.journal import apply_events_batch
from app.services.listing import finish_listing, record_listed_origins, start_listing
from app.services.requests import create_request
from app.services.scheduler_step import MIN_FREE_FRACTION, plan_step
from app.services.scheduling import free_slots, visit_number
from app.settings import Settings
from app.simulator.config import WorldConfig
from app.simulator.oracle import OracleScheduler, RateOnlyOracle
from app.simulator.truth import Truth
from app.simulator.workers import Order, WorkerPool
from app.simulator.world import DAY_S, VisitTypeWorldState, at, build_world

LISTING_BATCH = 10000
#: Lane time limits of the simulation: visits are never cut short.
NO_LANE_LIMIT_S = 1e12
SIMULATED_ALLOCATION_INTERVAL_S = 6 * 3600.0


class SimulationError(RuntimeError):
    """The world does not fit the database (e.g. an unknown visit type)."""


@dataclass(order=True)
class _Due:
    """A journal event to apply once the clock reaches its date."""

    date_s: float
    seq: int
    event: VisitStatusEvent = field(compare=False)
    vt: str = field(compare=False)
    order: Order | None = field(compare=False, default=None)
    """Set on final statuses: the visit the event ends."""
    start_s: float = field(compare=False, default=0.0)
    duration_s: float = field(compare=False, default=0.0)
    reach: int | None = field(compare=False, default=None)
    """Set on successes: the origin's changes the archive holds after the visit."""


@dataclass
class _VisitType:
    """The running state of one visit type."""

    world: VisitTypeWorldState
    truth: Truth
    recurrent: WorkerPool
    requests: WorkerPool
    lister_ids: list[Any]
    next_listing_s: list[float]
    request_arrivals: list[float]
    policies: dict[str, float] = field(default_factory=dict)
    index_of: dict[str, int] = field(default_factory=dict)
    request_created_s: dict[int, float] = field(default_factory=dict)
    pools: list[dict[str, Any]] = field(default_factory=list)
    returned: Counter[str] = field(default_factory=Counter)


def simulation_settings(settings: Settings, config: WorldConfig) -> Settings:
    """``settings`` with the world's ladder unit."""
    update: dict[str, Any] = {
        # One pool of simulated workers serves the recurrent visits: no visit is
        # predicted to outlast the express lane, and the slow lane stays empty.
        "express_time_limit_s": NO_LANE_LIMIT_S,
        **{k: v for k, v in config.settings.items() if k not in TUNING_KNOBS},
    }
    return settings.model_copy(update=update)


def simulation_tuning(config: WorldConfig) -> Tuning:
    """The research knobs with the world's overrides."""
    # Re-solving the allocation every few simulated hours tracks a capacity
    # that changes over days, at a fraction of the cost of every step.
    knobs: dict[str, Any] = {"allocation_interval_s": SIMULATED_ALLOCATION_INTERVAL_S}
    knobs |= {k: v for k, v in config.settings.items() if k in TUNING_KNOBS}
    return Tuning(**knobs)


class Simulation:
    """One run of a world against one (empty, migrated) database and Redis."""

    def __init__(
        self, conn: DictConnection, settings: Settings, config: WorldConfig, days: float
    ) -> None:
        self.conn = conn
        self.config = config
        self.ctx = Context.from_settings(
            simulation_settings(settings, config), simulation_tuning(config)
        )
        self.now = config.start.timestamp()
        if config.oracle_rates:
            self.ctx = dataclasses.replace(self.ctx, known_rate_per_s=self._true_rate_per_s)
        self.start_s = config.start.timestamp()
        self.end_s = self.start_s + days * DAY_S
        self.step_s = config.step_minutes * 60
        measure_from = self.start_s + min(config.burn_in_days, days / 2) * DAY_S
        self.measure_from_s = measure_from
        window = (measure_from, self.end_s)
        known = known_visit_types(conn)
        seeds = np.random.SeedSequence([config.seed, 1]).spawn(2)
        self.outcome_rng = np.random.default_rng(seeds[0])
        request_rng = np.random.default_rng(seeds[1])
        self.configs = visit_type_configs(conn)
        self.types: dict[str, _VisitType] = {}
        for world in build_world(config, days):
            vt = world.config
            if vt.name not in known:
                raise SimulationError(
                    f"visit_types.{vt.name}: unknown visit type (known: {sorted(known)})"
                )
            if vt.policies is not None:
                set_policies(conn, vt.name, vt.policies)
            set_max_queue_length(conn, vt.name, max(1, vt.queue_length), NO_LANE_LIMIT_S)
            count = request_rng.poisson(vt.requests_per_day * days)
            self.types[vt.name] = _VisitType(
                world=world,
                truth=Truth(
                    world.origins,
                    measure_from,
                    config.starvation_bound_days * DAY_S,
                    self.configs[vt.name].max_interval_s,
                    [lister.reports_last_update for lister in vt.listers],
                ),
                recurrent=WorkerPool(vt.workers, vt.queue_length, window),
                requests=WorkerPool(vt.request_workers, 2 * vt.request_workers, window),
                lister_ids=[
                    register_lister(conn, lister.name, vt.name, None) for lister in vt.listers
                ],
                next_listing_s=[self.start_s] * len(vt.listers),
                request_arrivals=sorted(
                    float(t) for t in request_rng.uniform(self.start_s, self.end_s, count)
                ),
                policies=policies_of(conn, vt.name),
                index_of={o.url: o.index for o in world.origins},
            )
        self.request_rng = request_rng
        self._origin_of = {o.url: o for state in self.types.values() for o in state.world.origins}
        self.configs = visit_type_configs(conn)  # with the world's queue lengths
        self.oracles: dict[str, OracleScheduler] = {}
        """With ``rate_only_oracle`` or ``round_robin``: what schedules each visit
        type's recurrent queue."""
        if config.rate_only_oracle or config.round_robin:
            for name, state in self.types.items():
                oracle = RateOnlyOracle(
                    state.world.origins,
                    config.loader,
                    state.world.config.workers,
                    self.configs[name].max_interval_s * FLOOR_MARGIN,
                    uniform=config.round_robin,
                )
                self.oracles[name] = OracleScheduler(name, oracle, state.index_of)
        self._due: list[_Due] = []
        self._seq = itertools.count()
        self.finished_requests = 0
        self.beyond_history: Counter[str] = Counter()
        """Final statuses the journal code could not place, by visit type."""
        self.steps = 0

    def run(self, on_step: Callable[[float], None] | None = None) -> None:
        """Step from the start to the end; ``on_step(t)`` after each step."""
        t = self.start_s
        if self.config.warm_start_days > 0:
            self._warm_start(t)
        while t < self.end_s:
            self.step(t)
            t = self.start_s + self.steps * self.step_s
            if on_step is not None:
                on_step(t)

    def step(self, t: float) -> None:
        """One tick at simulated time ``t`` (see the module docstring)."""
        self.now = t
        self._apply_journal(t)
        for name, state in self.types.items():
            self._listings(name, state, t)
            self._new_requests(name, state, t)
            state.truth.sample(t)
            if self.steps % 4 == 0:
                state.pools.append({"t": t, **self.ctx.mirror.sizes(name)})
            self._schedule(name, state, t)
        self._serve(t, t + self.step_s)
        self.steps += 1

    def _serve(self, t: float, until: float) -> None:
        """Run the workers from ``t`` to ``until``, the scheduler stepping for a
        visit type whenever a visit's end leaves its queue room enough to refill,
        the earliest first, so the journal is applied in the order of time."""
        visits = {name: functools.partial(self._visit, name) for name in self.types}
        refill: dict[str, float | None] = {
            name: state.recurrent.advance(t, until, visits[name], self._room(name))
            for name, state in self.types.items()
        }
        while any(x is not None for x in refill.values()):
            x, name = min((x, name) for name, x in refill.items() if x is not None)
            self.now = x
            for other, state in self.types.items():
                state.requests.work(x, visits[other])
            self._apply_journal(x)
            state = self.types[name]
            self._schedule(name, state, x)
            refill[name] = state.recurrent.advance(x, until, visits[name], self._room(name))
        for name, state in self.types.items():
            state.requests.work(until, visits[name])

    def _room(self, name: str) -> int:
        """Free slots of the recurrent queue for which the scheduler sends a batch:
        ``plan_step`` counts both lanes against twice ``max_queue_length``, and
        the simulator's slow lane is always full."""
        bound = self.configs[name].max_queue_length
        return next(
            (
                k
                for k in range(1, bound + 1)
                if free_slots(2 * bound, 2 * bound - k, MIN_FREE_FRACTION)
            ),
            bound,
        )

    def _true_rate_per_s(self, url: str) -> float | None:
        """The origin's hidden change rate now (per second): 0 while dormant or dead."""
        origin = self._origin_of.get(url)
        if origin is None:
            return None
        if origin.kind == "dead" or self.now < origin.wake_s:
            return 0.0
        return origin.rate_per_day / DAY_S

    def _warm_start(self, t: float) -> None:
        """List the world, then feed the journal one past successful visit of each
        origin that exists at the start, as if the archive had been running."""
        rng = np.random.default_rng(np.random.SeedSequence([self.config.seed, 2]))
        span = self.config.warm_start_days * DAY_S
        for name, state in self.types.items():
            self._listings(name, state, t)
            for origin in state.world.origins:
                if origin.appear_s >= t:
                    continue
                start = max(origin.appear_s, t - span * float(rng.uniform()))
                order = Order(origin.index, origin.url, visit_number(start), "warm_start", start)
                self._visit(name, order, start, status="full", duration=0.0)
        self._apply_journal(t)

    def _apply_journal(self, t: float) -> None:
        batch: list[_Due] = []
        while self._due and self._due[0].date_s <= t:
            batch.append(heapq.heappop(self._due))
        if not batch:
            return
        events = [d.event for d in batch]
        # Re-read: the scheduling step updates the age-optimal multiplier.
        self.configs = visit_type_configs(self.conn)
        outcome = apply_events_batch(self.conn, self.ctx, events, self.configs, at(t))
        self.finished_requests += len(outcome.finished_requests)
        self.beyond_history.update(outcome.beyond_history)
        for due in batch:
            order = due.order
            if order is None:
                continue
            state = self.types[due.vt]
            end = due.start_s + due.duration_s
            oracle = self.oracles.get(due.vt)
            if oracle is not None and due.event.status in ("full", "partial"):
                oracle.oracle.visited(order.index, due.start_s)
            # a visit that fetches nothing takes its fixed part
            fixed_s = self.config.loader.visit_s(0.0, state.world.origins[order.index].size)
            state.truth.visited(
                order.index,
                due.start_s,
                end,
                due.event.status,
                due.duration_s,
                order.policy,
                due.reach,
                fetch_s=max(0.0, due.duration_s - fixed_s),
            )
            if order.request_id is not None:
                created = state.request_created_s.pop(order.request_id)
                if end >= self.measure_from_s:
                    state.truth.request_latencies_s.append(end - created)
                    state.truth.request_waits_s.append(due.start_s - created)

    def _listings(self, name: str, state: _VisitType, t: float) -> None:
        for k, lister in enumerate(state.world.listers):
            if state.next_listing_s[k] > t or lister.down((t - self.start_s) / DAY_S):
                continue  # not due, or its forge is down: it lists once back
            state.next_listing_s[k] += lister.period_hours * 3600
            view = t - lister.delay_hours * 3600
            rows: list[tuple[int, ListedOriginIn]] = []
            for o in state.world.origins:
                if o.lister != k or o.appear_s > view or o.vanish_s <= view:
                    continue
                last_update = None
                if lister.reports_last_update:
                    last_update = at(float(o.changes[max(0, o.changes_until(view) - 1)]))
                rows.append(
                    (
                        len(rows) + 1,
                        ListedOriginIn(url=o.url, visit_type=name, last_update=last_update),
                    )
                )
                state.truth.listed(o.index, t)
            lister_id = state.lister_ids[k]
            started = start_listing(self.conn, lister_id, at(t))
            for i in range(0, len(rows), LISTING_BATCH):
                record_listed_origins(
                    self.conn, self.ctx, lister_id, rows[i : i + LISTING_BATCH], at(t)
                )
            finish_listing(self.conn, self.ctx, lister_id, started, at(t), full=True)

    def _new_requests(self, name: str, state: _VisitType, t: float) -> None:
        while state.request_arrivals and state.request_arrivals[0] <= t:
            state.request_arrivals.pop(0)
            truth = state.truth
            candidates = np.flatnonzero(np.isfinite(truth.listed_at) & (truth.vanish > t))
            if candidates.size == 0:
                continue
            index = int(self.request_rng.choice(candidates))
            request_id = create_request(
                self.conn, RequestVisit(url=state.world.origins[index].url, visit_type=name)
            )
            state.request_created_s[request_id] = t

    def _schedule(self, name: str, state: _VisitType, t: float) -> None:
        """The scheduler process's own step (``app.services.scheduler_step.plan_step``), with
        the simulated worker pools standing for the Dramatiq queues."""
        config = self.configs[name]
        pools = {
            priority_queue(name): state.requests,
            visit_queue(name): state.recurrent,
        }

        oracle = self.oracles.get(name)

        def depth(queue: str) -> int:
            pool = pools.get(queue)
            # Queues without simulated workers (the slow lane, first-visits
            # queues) are reported full, so nothing is sent to them; so is the
            # recurrent queue when the oracle fills it.
            if pool is None or (oracle is not None and pool is state.recurrent):
                return config.max_queue_length
            return pool.depth(t)

        plan = plan_step(self.conn, self.ctx, config, depth, at(t), state.policies)
        result = plan.recurrent
        state.returned.update(cooled=result.cooled, lost=result.lost)
        index_of = state.index_of
        for send in plan.sends:
            o = send.order
            order = Order(index_of[o.url], o.url, o.visit, o.policy, t, o.request_id)
            (state.requests if send.lane == "priority" else state.recurrent).send([order])
        if oracle is not None:
            # the free slots plan_step would fill, the slow lane full as above
            bound = config.max_queue_length
            free = max(0, bound - state.recurrent.depth(t))
            slots = free_slots(2 * bound, 2 * bound - free, MIN_FREE_FRACTION)
            replan = SIMULATED_ALLOCATION_INTERVAL_S
            sends = oracle.send(self.conn, self.ctx, t, slots, state.truth.listed_at, replan)
            policy = oracle.oracle.policy
            state.recurrent.send([Order(i, url, visit, policy, t) for i, url, visit in sends])

    def _outcome(self, name: str, order: Order, start: float) -> tuple[str, float, int | None]:
        """A visit's final status, duration and (on success) the changes the
        archive holds after it, drawn from the hidden world; a visit cut at the
        loader's cap is partial (``Loader``)."""
        loader = self.config.loader
        state = self.types[name]
        origin = state.world.origins[order.index]
        if origin.kind == "dead" or start >= origin.vanish_s:
            return "not_found", loader.base_s * loader.scale, None
        if state.world.listers[origin.lister].down((start - self.start_s) / DAY_S):
            return "failed", loader.base_s * loader.scale, None
        if origin.kind == "flaky" and self.outcome_rng.random() < loader.flaky_failure_probability:
            return "failed", loader.base_s * loader.scale, None
        truth = state.truth
        commits = truth.new_commits(order.index, start)
        fetchable = loader.fetchable_commits()
        if commits <= fetchable:
            return "full", loader.visit_s(commits, origin.size), origin.changes_until(start)
        reach = truth.reach(order.index, start, fetchable)
        return "partial", loader.visit_s(commits, origin.size), reach

    def _visit(
        self,
        name: str,
        order: Order,
        start: float,
        status: str | None = None,
        duration: float = 0.0,
    ) -> float:
        """Simulate one visit: queue its journal events, return its duration."""
        origin = self.types[name].world.origins[order.index]
        reach: int | None
        if status is None:
            status, duration, reach = self._outcome(name, order, start)
        else:
            reach = origin.changes_until(start)
        snapshot: bytes | None = None
        if reach is not None and status in ("full", "partial"):
            snapshot = hashlib.sha1(f"{origin.url}#{reach}".encode()).digest()
        created = VisitStatusEvent(order.url, name, order.visit, at(start), "created", None)
        # the loader's worker time, as production's workers report it
        metadata = {"duration_s": duration} if duration > 0 else None
        final = VisitStatusEvent(
            order.url, name, order.visit, at(start + duration), status, snapshot, metadata
        )
        heapq.heappush(self._due, _Due(start, next(self._seq), created, name))
        heapq.heappush(
            self._due,
            _Due(start + duration, next(self._seq), final, name, order, start, duration, reach),
        )
        return duration
