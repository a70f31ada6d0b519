"""The ``oracle`` baseline: the rate-only age-optimal allocation of the true change rates.

Each live origin is visited every ``I = optimal_interval_s(λ, μ, floor)``
(``app.domain.allocation``), λ its true hidden change rate at the moment (0
while dormant or dead), the floor production's (``max_interval`` less its
margin). μ is solved for the recurrent workers' time: a visit costs its fixed
part, ``scale * size * base_s``, and fetching an origin's changes costs
``λ * commits_per_change * per_commit_s * scale * size`` worker seconds a
second whatever its interval, so μ is the multiplier whose visits' fixed parts
fill the time the fetching leaves (``multiplier_for_capacity``, each origin
weighted by its fixed part; infinite, every origin at the floor, when fetching
alone takes all of it). It is re-solved as production re-solves its own
(``SIMULATED_ALLOCATION_INTERVAL_S``). No ``last_update``, no reported change,
nothing learned: what spacing the visits by the true rates alone achieves.

With ``uniform`` it is the ``round_robin`` baseline instead: every interval
the same (the floor), whatever the rate, so the ranking below is the origin
longest without a successful visit first: every origin equally often, through
the same claim, cooldowns and queue as the oracle.

It runs inside the simulator in place of the policies of the recurrent queue,
through production's claim and mark (``OracleScheduler``): the mirror skips
origins resting (cooldowns), in flight, unlisted or disabled for failures, as
for every policy, and failures, the loader's cap, requests and the queue weigh
on it as on the rest. Each step hands the mirror, in order, the origins never
visited successfully (first listed first), then the others by how far through their
interval they are, ``(now - start of the last successful visit) / I``,
largest first (a failed visit leaves an origin due: the cooldowns space its retries).
Ranking by that share keeps the workers busy whatever the solve misses (first
visits, failures, the loader's cap, which the cost above ignores): every
interval stretches or shrinks by one common factor, so each origin's visits
stay evenly spaced, in the allocation's proportions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.db.connection import DictConnection
from app.db.listings import mirror_row
from app.db.mirror import mirror_row_batches, urls_of
from app.db.scheduling import mark_scheduled
from app.domain.allocation import multiplier_for_capacity, optimal_interval_s
from app.domain.placement import epoch_s
from app.services.context import Context
from app.services.mirror_sync import place_rows
from app.services.scheduling import visit_number
from app.simulator.config import Loader
from app.simulator.world import DAY_S, Origin, at

Array = np.ndarray[tuple[int], np.dtype[np.float64]]

#: Rate classes per decade of the μ solve (the intervals use each origin's own rate).
CLASSES_PER_DECADE = 20
#: Origins handed to the mirror per claim, per slot to fill.
CLAIM_CHUNK_PER_SLOT = 8
POLICY = "oracle"
ROUND_ROBIN = "round_robin"
UNKNOWN, NO_ROW = -1, -2


def rate_classes(rates_per_s: Array, weights: Array) -> list[tuple[float, float]]:
    """(rate, summed weight) classes for ``multiplier_for_capacity``: the zero rates
    in one class, the others in log bins of ``CLASSES_PER_DECADE`` per decade at
    their weighted mean rate."""
    positive = rates_per_s > 0
    classes: list[tuple[float, float]] = []
    if not positive.all():
        classes.append((0.0, float(weights[~positive].sum())))
    if positive.any():
        rates, w = rates_per_s[positive], weights[positive]
        bins = np.floor(np.log10(rates) * CLASSES_PER_DECADE).astype(np.int64)
        _, inverse = np.unique(bins, return_inverse=True)
        total = np.bincount(inverse, weights=w)
        weighted = np.bincount(inverse, weights=w * rates)
        classes += [(float(r / t), float(t)) for r, t in zip(weighted, total, strict=True) if t > 0]
    return classes


class RateOnlyOracle:
    """The allocation and the ranking of one visit type's origins (pure: no I/O)."""

    def __init__(
        self,
        origins: Sequence[Origin],
        loader: Loader,
        workers: int,
        floor_s: float,
        *,
        uniform: bool = False,
    ) -> None:
        self.origins = origins
        self.uniform = uniform
        """Every origin the same interval: the ``round_robin`` baseline."""
        self.policy = ROUND_ROBIN if uniform else POLICY
        sizes = np.array([o.size for o in origins], dtype=np.float64)
        self.fixed_s = loader.scale * sizes * loader.base_s
        per_change = loader.commits_per_change * loader.per_commit_s
        self.fetch_s_per_change = loader.scale * sizes * per_change
        self.workers = workers
        self.floor_s = floor_s
        self.multiplier_s2 = math.inf
        self.interval_s = np.full(len(origins), floor_s)
        self.last_visit_s = np.full(len(origins), -math.inf)
        """Start of each origin's latest successful visit (-inf: none yet)."""

    def true_rates_per_s(self, t: float) -> Array:
        """Each origin's hidden change rate at ``t``: 0 while dormant or dead."""
        return np.array(
            [
                0.0 if o.kind == "dead" or t < o.wake_s else o.rate_per_day / DAY_S
                for o in self.origins
            ]
        )

    def plan(self, t: float, live: np.ndarray[tuple[int], np.dtype[np.bool_]]) -> None:
        """Solve μ for the ``live`` origins' true rates at ``t`` and the workers' time;
        set every origin's interval (with ``uniform``, the floor for every origin)."""
        if self.uniform:
            return
        rates = self.true_rates_per_s(t)
        fetching = float((rates * self.fetch_s_per_change)[live].sum())
        classes = rate_classes(rates[live], self.fixed_s[live])
        self.multiplier_s2 = (
            multiplier_for_capacity(classes, self.workers - fetching, self.floor_s)
            if classes
            else math.inf
        )
        self.interval_s = np.array(
            [optimal_interval_s(float(r), self.multiplier_s2, self.floor_s) for r in rates]
        )

    def visited(self, index: int, start: float) -> None:
        """A successful visit of the origin (recurrent or request) that started at
        ``start`` ended: the allocation's interval runs between archivings, so a
        failed visit leaves the origin as due as it was, its retry left to the
        cooldowns."""
        self.last_visit_s[index] = max(self.last_visit_s[index], start)

    def ranking(self, t: float, listed_at: Array) -> np.ndarray[tuple[int], np.dtype[np.int64]]:
        """Indices of the origins listed by ``t``, in the order the mirror is handed
        them: never visited successfully first (first listed first), then by the
        share of their interval elapsed since their last successful visit, largest
        first."""
        elapsed = np.where(np.isfinite(self.last_visit_s), t - self.last_visit_s, math.inf)
        share = elapsed / self.interval_s
        candidates = np.flatnonzero(listed_at <= t)
        order = np.lexsort((candidates, listed_at[candidates], -share[candidates]))
        return candidates[order]


class OracleScheduler:
    """``RateOnlyOracle`` sending through production's mirror claim and Postgres mark."""

    def __init__(self, visit_type: str, oracle: RateOnlyOracle, index_of: dict[str, int]) -> None:
        self.visit_type = visit_type
        self.oracle = oracle
        self.index_of = index_of
        self.ids = np.full(len(oracle.origins), UNKNOWN, dtype=np.int64)
        self.planned_at = -math.inf

    def send(
        self,
        conn: DictConnection,
        ctx: Context,
        t: float,
        slots: int,
        listed_at: Array,
        replan_s: float,
    ) -> list[tuple[int, str, int]]:
        """Claim and mark up to ``slots`` origins at ``t``; return (index, url, visit)
        of each, in the oracle's order."""
        if t - self.planned_at >= replan_s:
            vanish = np.array([o.vanish_s for o in self.oracle.origins])
            self.oracle.plan(t, (listed_at <= t) & (vanish > t))
            self.planned_at = t
        if slots <= 0:
            return []
        ranked = self.oracle.ranking(t, listed_at)
        if (self.ids[ranked] == UNKNOWN).any():
            self._learn_ids(conn, ranked)
        ranked = ranked[self.ids[ranked] >= 0]
        now_s = epoch_s(at(t))
        claimed: list[int] = []
        chunk = CLAIM_CHUNK_PER_SLOT * slots
        for lo in range(0, ranked.size, chunk):
            ids = [int(i) for i in self.ids[ranked[lo : lo + chunk]]]
            popped = ctx.mirror.claim(self.visit_type, ids, now_s, slots - len(claimed))
            claimed += [p.id for p in popped]
            if len(claimed) >= slots:
                break
        if not claimed:
            return []
        rows = mark_scheduled(conn, claimed, at(t))
        place_rows(ctx, map(mirror_row, rows), at(t))
        visit = visit_number(now_s)
        return [(self.index_of[str(r["url"])], str(r["url"]), visit) for r in rows]

    def _learn_ids(self, conn: DictConnection, wanted: np.ndarray[tuple[int], Any]) -> None:
        """Read the stats id of every origin listed; ``wanted`` without one have none."""
        with conn.transaction():  # a server-side cursor
            ids = [int(r[0]) for batch in mirror_row_batches(conn, self.visit_type) for r in batch]
        for origin, url in urls_of(conn, ids).items():
            index = self.index_of.get(url)
            if index is not None:
                self.ids[index] = origin
        missing = wanted[self.ids[wanted] == UNKNOWN]
        self.ids[missing] = NO_ROW
