"""Periodic figures of the scheduler process: seed 002's coverage per lister
and visit type (kept in ``scheduler_metrics`` and exported), seed 000's
schedule drift, and the time newly listed origins waited for a first visit.

They are read from PostgreSQL on a thread of their own with its own
connections, so a slow refresh never delays scheduling.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from app.db.connection import Connections, DictConnection
from app.db.metrics import (
    first_visits_since,
    pool_rows_by_lister,
    refresh_scheduler_metrics,
    schedule_drift,
)
from app.db.policies import policies_of
from app.domain.cooldown import Cooldowns
from app.domain.placement import place
from app.domain.policies import policy_of_pool, spacing_of
from app.services.context import Tuning
from app.settings import Settings
from monitoring.metrics import (
    COVERAGE_GAUGES,
    COVERAGE_REFRESH_SECONDS,
    FIRST_VISIT_WAIT,
    ORIGINS_BY_POOL,
    SCHEDULE_DRIFT,
)

#: How often the coverage, drift and first-visit figures are refreshed.
REFRESH_INTERVAL_S = 60.0
#: How often origins are counted per pool and lister (a scan of the listings).
POOLS_BY_LISTER_INTERVAL_S = 600.0
#: Listed this long ago and never visited: overdue.
NEVER_VISITED_THRESHOLD_S = 86400.0

#: An origin updated this recently is active.
ACTIVE_WINDOW_S = 86400.0
#: How late a first visit may reach PostgreSQL after its date and still be observed.
FIRST_VISIT_LOOKBACK_S = 3600.0


def refresh_coverage(
    conn: DictConnection, now: datetime, active_window_s: float, overdue_after_s: float
) -> list[dict[str, Any]]:
    """Recompute ``scheduler_metrics`` at ``now``; return its rows (with a ``lister``
    name) and set the coverage gauges from them."""
    active_since = now - timedelta(seconds=active_window_s)
    overdue_before = now - timedelta(seconds=overdue_after_s)
    rows = refresh_scheduler_metrics(conn, now, active_since, overdue_before)
    for column, gauge in COVERAGE_GAUGES.items():
        for row in rows:
            gauge.labels(row["lister"], row["visit_type"]).set(row[column])
    return rows


def export_drift(conn: DictConnection, now: datetime) -> dict[str, float]:
    """Set the schedule drift of every visit type with a queue position and a
    ladder spacing; return it. (Under age_optimal the scheduler sets it from the
    planned pools' heads: the queue position is the ladder's.)"""
    drift = {
        visit_type: seconds
        for visit_type, seconds in schedule_drift(conn, now).items()
        if spacing_of(policies_of(conn, visit_type)) == "ladder"
    }
    for visit_type, seconds in drift.items():
        SCHEDULE_DRIFT.labels(visit_type).set(seconds)
    return drift


class FirstVisits:
    """Observes, once each, the wait of origins whose first visit is reported.

    A visit is dated when the worker ends it but reaches PostgreSQL when the
    journal client applies it, later; so each look reaches ``lookback_s``
    into the past and remembers which origins it already observed.
    """

    def __init__(self, since: datetime, lookback_s: float) -> None:
        self.since = since
        self.lookback = timedelta(seconds=lookback_s)
        self.seen: dict[int, datetime] = {}

    def observe(self, conn: DictConnection, now: datetime) -> int:
        """Observe the first visits not yet seen; return how many."""
        since = max(self.since, now - self.lookback)
        observed = 0
        for row in first_visits_since(conn, since):
            if row["id"] in self.seen or row["wait_s"] is None:
                continue
            self.seen[row["id"]] = row["last_final_date"]
            FIRST_VISIT_WAIT.labels(row["visit_type"]).observe(max(0.0, float(row["wait_s"])))
            observed += 1
        self.seen = {k: v for k, v in self.seen.items() if v >= since}
        return observed


def export_pools_by_lister(
    conn: DictConnection, now: datetime, cooldowns: Cooldowns
) -> dict[tuple[str, str, str, str], int]:
    """Origins per place (pool, in flight, cooling) and the policy that picks from
    that pool, by lister and visit type (seed 000's first metric). Places come
    from app.domain.placement, the rule the mirror itself follows."""
    policies: dict[str, dict[str, float]] = {}
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for lister, row in pool_rows_by_lister(conn):
        placed = place(row, now, cooldowns)
        if placed.where == "absent":
            continue
        vt = row.visit_type
        if vt not in policies:
            policies[vt] = policies_of(conn, vt)
        in_pool = placed.where == "pool"
        spot: str = placed.pool if in_pool else placed.where
        policy = policy_of_pool(policies[vt], placed.pool) if in_pool else ""
        counts[(lister, vt, spot, policy)] += 1
    ORIGINS_BY_POOL.clear()
    for (name, vt, spot, policy), count in counts.items():
        ORIGINS_BY_POOL.labels(name, vt, spot, policy).set(count)
    return dict(counts)


class CoverageRefresher:
    """Refreshes the periodic figures; the scheduler process calls ``refresh``
    every ``REFRESH_INTERVAL_S``."""

    def __init__(self, settings: Settings, now: datetime) -> None:
        self.settings = settings
        self.db = Connections(settings)
        self.first_visits = FirstVisits(now, FIRST_VISIT_LOOKBACK_S)
        self._pools_at = float("-inf")

    def refresh(self, now: datetime) -> None:
        """One refresh of every figure."""
        started = time.monotonic()
        with self.db.borrow() as conn:
            refresh_coverage(conn, now, ACTIVE_WINDOW_S, NEVER_VISITED_THRESHOLD_S)
            export_drift(conn, now)
            if time.monotonic() - self._pools_at >= POOLS_BY_LISTER_INTERVAL_S:
                self._pools_at = time.monotonic()
                cooldowns = Tuning().cooldowns(self.settings.ladder_unit_s)
                export_pools_by_lister(conn, now, cooldowns)
            self.first_visits.observe(conn, now)
        COVERAGE_REFRESH_SECONDS.observe(time.monotonic() - started)
