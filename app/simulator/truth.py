"""What the archive holds against what the forges hold: the scheduling quality.

One ``Truth`` per visit type follows every origin's hidden changes and the
simulated visits, and measures, from ``measure_from_s`` (the end of the
burn-in) on:

- freshness: share of live origins whose archived copy has every change;
- age: time since the first change the archive does not hold (0 if fresh);
- lag of each change: from the change to the end of the first successful
  visit that started after it;
- useless visits: successful visits that found nothing new, and their share
  of worker time;
- time from first listing to first visit of origins that appear during the run;
- starvation: the tail of the age, origins with a change pending for more than
  30 days, origins left longer than a bound without a successful visit.

Live origins are those on their forge (appeared, not vanished) and not dead:
a dead origin has nothing left to archive.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.domain.visit_stats import FLOOR_MARGIN
from app.domain.visit_status import SUCCESS_STATUSES, is_success
from app.simulator.world import DAY_S, Origin

HOUR_S = 3600.0
PENDING_LIMIT_S = 30 * DAY_S
FIRST_VISIT_LIMIT_S = 7 * DAY_S
#: Bounds (changes a day) of the true-rate classes the report splits the age and the
#: visits by (a dormant origin by its rate once awake): where a policy's age comes from.
RATE_CLASS_BOUNDS_PER_DAY = (0.01, 0.1, 1.0)
RATE_CLASSES = ("below_0.01", "0.01_0.1", "0.1_1", "from_1")
_CLASS_COUNTS = ("visits", "useless", "worker_s")


def percentiles(values: list[float], scale: float, *qs: float) -> dict[str, float | None]:
    """The ``qs`` percentiles, mean and max of ``values`` divided by ``scale``."""
    keys = ["mean", *(f"p{q:g}".replace(".", "") for q in qs), "max"]
    if not values:
        return dict.fromkeys(keys, None)
    array = np.asarray(values) / scale
    figures = [float(array.mean()), *(float(np.percentile(array, q)) for q in qs)]
    return dict(zip(keys, [*figures, float(array.max())], strict=True))


def _share(counts: Counter[str], key: str) -> float | None:
    total = sum(counts.values())
    return counts[key] / total if total else None


@dataclass
class Sample:
    """The state of the archive at one instant."""

    t: float
    freshness: float
    mean_age_days: float
    age_p999_days: float
    age_max_days: float
    pending_over_30_days: int
    live: int
    age_days_last_update: float = 0.0
    """Mean age of the live origins whose lister reports last_update."""
    age_days_no_last_update: float = 0.0
    """Mean age of the other live origins."""
    age_days_by_kind: dict[str, float] = field(default_factory=dict)
    """Mean age of the live origins of each kind (regular, flaky...)."""
    age_days_without_flaky: float = 0.0
    """Mean age of the live origins that are not flaky: what the scheduling
    controls, the failed cooldown of flaky origins aside."""
    age_days_by_rate_class: tuple[float, ...] = ()
    """Per true-rate class (``RATE_CLASSES``), its origins' summed age over the
    live origins: its share of ``mean_age_days`` (the shares add up to it)."""
    live_by_rate_class: tuple[int, ...] = ()
    """Live origins per true-rate class."""


@dataclass
class Truth:
    """The hidden state of one visit type's origins and the measures taken on it."""

    origins: list[Origin]
    measure_from_s: float
    starvation_bound_s: float
    max_interval_s: float = math.inf
    """The visit type's ``max_interval``: no live origin should wait longer for a
    successful visit (the floor of the allocation)."""
    reports_last_update: list[bool] = field(default_factory=list)
    """Per lister (by index): whether it reports each origin's last_update."""
    samples: list[Sample] = field(default_factory=list)
    lags_s: list[float] = field(default_factory=list)
    request_latencies_s: list[float] = field(default_factory=list)
    request_waits_s: list[float] = field(default_factory=list)
    """Request created → its visit started: the scheduler's share of the latency
    (the rest is the visit, which a first visit of a large origin makes hours)."""
    visits: Counter[str] = field(default_factory=Counter)
    visits_with_last_update: Counter[str] = field(default_factory=Counter)
    policies: Counter[str] = field(default_factory=Counter)
    useless_floor_visits: int = 0
    """Useless floor visits where the lister reports last_update (``_floor_share``)."""
    busy_s: float = 0.0
    useless_busy_s: float = 0.0
    first_fetch_busy_s: float = 0.0
    """Worker time of first successful visits (fetching an origin's whole history)."""
    fetch_busy_s: float = 0.0
    """Worker seconds successful recurrent visits (first visits aside) spent
    fetching commits, beyond their fixed part."""
    busy_by_kind_s: dict[str, float] = field(default_factory=dict)
    """Worker seconds of the measured visits by what they were: ``first`` (no
    success yet), else ``last_update`` or ``no_last_update`` (the origin's lister)."""
    by_rate_class: dict[str, dict[str, float]] = field(default_factory=dict)
    """Measured recurrent visits per true-rate class: ``visits``, ``useless``,
    ``worker_s`` (their duration)."""

    def __post_init__(self) -> None:
        n = len(self.origins)
        self.appear = np.array([o.appear_s for o in self.origins])
        self.vanish = np.array([o.vanish_s for o in self.origins])
        self.dead = np.array([o.kind == "dead" for o in self.origins], dtype=bool)
        flags = self.reports_last_update
        self.with_last_update = np.array(
            [bool(flags) and flags[o.lister] for o in self.origins], dtype=bool
        )
        self.kinds = np.array([o.kind for o in self.origins], dtype=object)
        rates = np.array([o.rate_per_day for o in self.origins], dtype=np.float64)
        self.rate_class = np.digitize(rates, RATE_CLASS_BOUNDS_PER_DAY)
        self.pending_since = np.array([o.changes[0] for o in self.origins])
        self.archived = np.zeros(n, dtype=np.int64)
        self.listed_at = np.full(n, math.inf)
        self.first_visit_at = np.full(n, math.inf)
        self.last_success_at = np.full(n, -math.inf)
        self.starved = np.zeros(n, dtype=bool)
        self.beyond_max_interval = np.zeros(n, dtype=bool)

    def listed(self, index: int, t: float) -> None:
        """A lister reported the origin at ``t``."""
        self.listed_at[index] = min(self.listed_at[index], t)

    def new_commits(self, index: int, start: float) -> int:
        """Commits a visit starting at ``start`` would fetch."""
        origin = self.origins[index]
        count = origin.changes_until(start)
        done = int(self.archived[index])
        if count <= done:
            return 0
        before = int(origin.commits[done - 1]) if done else 0
        return int(origin.commits[count - 1]) - before

    def reach(self, index: int, start: float, most_commits: float) -> int:
        """How many of the origin's changes the archive holds after a visit starting
        at ``start`` that fetches at most ``most_commits`` new commits: all that
        happened by then if they fit, else the whole changes that fit (at least
        one, so a visit always moves the archive on)."""
        origin = self.origins[index]
        count = origin.changes_until(start)
        done = int(self.archived[index])
        if count <= done:
            return count
        before = int(origin.commits[done - 1]) if done else 0
        fits = int(np.searchsorted(origin.commits[done:count], before + most_commits, "right"))
        return done + max(1, fits)

    def is_news(self, index: int, start: float) -> bool:
        """Whether a visit starting at ``start`` would find a change the archive lacks."""
        return self.origins[index].changes_until(start) > int(self.archived[index])

    def visited(
        self,
        index: int,
        start: float,
        end: float,
        status: str,
        duration_s: float,
        policy: str,
        reach: int | None = None,
        fetch_s: float = 0.0,
    ) -> None:
        """Record a visit of ``index`` (started at ``start``) at its end; a
        successful one saves the changes up to ``reach`` (default: every change
        by ``start``), and spent ``fetch_s`` of its duration fetching commits."""
        self.first_visit_at[index] = min(self.first_visit_at[index], end)
        success = is_success(status)
        measured = end >= self.measure_from_s
        if measured and policy != "request":
            useless = success and not self.is_news(index, start)
            self.visits[status] += 1
            self.visits["useless" if useless else "useful"] += success
            if self.with_last_update[index]:
                self.visits_with_last_update["useless" if useless else "useful"] += success
                # the floor visit production owes every origin, changed or not
                floor = start - self.last_success_at[index] >= FLOOR_MARGIN * self.max_interval_s
                self.useless_floor_visits += useless and floor
            self.policies[policy] += 1
            self.busy_s += duration_s
            self.useless_busy_s += duration_s if useless else 0.0
            first_fetch = success and self.archived[index] == 0
            reported = "last_update" if self.with_last_update[index] else "no_last_update"
            kind = "first" if self.archived[index] == 0 else reported
            self.busy_by_kind_s[kind] = self.busy_by_kind_s.get(kind, 0.0) + duration_s
            self.first_fetch_busy_s += duration_s if first_fetch else 0.0
            counts = self.by_rate_class.setdefault(
                RATE_CLASSES[self.rate_class[index]], dict.fromkeys(_CLASS_COUNTS, 0.0)
            )
            for key, value in zip(_CLASS_COUNTS, (1.0, float(useless), duration_s), strict=True):
                counts[key] += value
            self.fetch_busy_s += fetch_s if success and not first_fetch else 0.0
        if success:
            self._archive(index, start, end, reach)

    def _archive(self, index: int, start: float, end: float, reach: int | None) -> None:
        origin = self.origins[index]
        count = origin.changes_until(start) if reach is None else reach
        done = int(self.archived[index])
        if count > done:
            changes = origin.changes[done:count]
            self.lags_s += [end - c for c in changes if c >= self.measure_from_s]
            self.archived[index] = count
            self.pending_since[index] = (
                origin.changes[count] if count < len(origin.changes) else math.inf
            )
        self.last_success_at[index] = max(self.last_success_at[index], end)

    def _floor_share(self) -> float | None:
        """Of the useless visits where the lister reports last_update, the share
        that were floor visits (at least the floor after the last success): the
        visit per ``max_interval`` owed to an origin that did not change."""
        useless = self.visits_with_last_update["useless"]
        return self.useless_floor_visits / useless if useless else None

    def live(self, t: float) -> np.ndarray[tuple[int], np.dtype[np.bool_]]:
        """Origins on their forge at ``t`` with something to archive."""
        live: np.ndarray[tuple[int], np.dtype[np.bool_]] = (
            (self.appear <= t) & (self.vanish > t) & ~self.dead
        )
        return live

    def sample(self, t: float) -> Sample:
        """Measure the archive at ``t`` (and note starved origins)."""
        live = self.live(t)
        age = np.maximum(0.0, t - self.pending_since[live])
        seen = np.where(np.isfinite(self.last_success_at), self.last_success_at, self.listed_at)
        if t >= self.measure_from_s:
            waited = np.where(live & np.isfinite(seen), t - seen, 0.0)
            self.starved |= waited > self.starvation_bound_s
            self.beyond_max_interval |= waited > self.max_interval_s
        reported = self.with_last_update[live]
        kinds = self.kinds[live]
        by_kind = {str(k): float(np.mean(age[kinds == k])) / DAY_S for k in np.unique(kinds) if k}
        steady = kinds != "flaky"
        classes = self.rate_class[live]
        total = max(1, int(live.sum()))
        by_class = tuple(
            float(np.sum(age[classes == c])) / total / DAY_S for c in range(len(RATE_CLASSES))
        )
        sample = Sample(
            t,
            float(np.mean(age == 0)) if age.size else 1.0,
            float(np.mean(age)) / DAY_S if age.size else 0.0,
            float(np.percentile(age, 99.9)) / DAY_S if age.size else 0.0,
            float(np.max(age)) / DAY_S if age.size else 0.0,
            int(np.sum(age > PENDING_LIMIT_S)),
            int(live.sum()),
            float(np.mean(age[reported])) / DAY_S if reported.any() else 0.0,
            float(np.mean(age[~reported])) / DAY_S if (~reported).any() else 0.0,
            by_kind,
            float(np.mean(age[steady])) / DAY_S if steady.any() else 0.0,
            by_class,
            tuple(int(n) for n in np.bincount(classes, minlength=len(RATE_CLASSES))),
        )
        self.samples.append(sample)
        return sample

    def summary(self, start_s: float, end_s: float) -> dict[str, Any]:
        """The time-averaged figures of the measured period."""
        measured = [s for s in self.samples if s.t >= self.measure_from_s]
        days = max(1e-9, (end_s - self.measure_from_s) / DAY_S)
        successes = sum(self.visits[s] for s in SUCCESS_STATUSES)

        def mean(name: str) -> float | None:
            return float(np.mean([getattr(s, name) for s in measured])) if measured else None

        return {
            "freshness": mean("freshness"),
            "age_days": mean("mean_age_days"),
            "age_days_by_lister": {
                "last_update": mean("age_days_last_update"),
                "no_last_update": mean("age_days_no_last_update"),
            },
            "age_days_by_kind": {
                kind: float(np.mean([s.age_days_by_kind.get(kind, 0.0) for s in measured]))
                for kind in sorted({k for s in measured for k in s.age_days_by_kind})
            },
            "age_days_without_flaky": mean("age_days_without_flaky"),
            "by_rate_class": self._by_rate_class(measured, days),
            "lag_days": {
                **percentiles(self.lags_s, DAY_S, 95, 99),
                "changes_archived": len(self.lags_s),
                "changes_pending_at_end": self._pending_changes(end_s),
            },
            "useless_visits": {
                "ratio": self.visits["useless"] / successes if successes else None,
                "ratio_where_last_update": _share(self.visits_with_last_update, "useless"),
                "floor_share_where_last_update": self._floor_share(),
                "worker_time_share": self.useless_busy_s / self.busy_s if self.busy_s else None,
            },
            "visits": {
                "per_day": sum(self.policies.values()) / days,
                "worker_s_per_day": self.busy_s / days,
                "first_fetch_worker_s_per_day": self.first_fetch_busy_s / days,
                "fetch_worker_s_per_day": self.fetch_busy_s / days,
                "worker_s_per_day_by_kind": {
                    k: self.busy_by_kind_s[k] / days for k in sorted(self.busy_by_kind_s)
                },
                "by_status": {k: self.visits[k] for k in sorted(self.visits)},
                "by_policy": {k: self.policies[k] for k in sorted(self.policies)},
            },
            "first_visit_hours": self._first_visits(start_s, end_s),
            "starvation": {
                "age_p999_days": mean("age_p999_days"),
                "age_max_days": max((s.age_max_days for s in measured), default=None),
                "pending_over_30_days": mean("pending_over_30_days"),
                "pending_over_30_days_at_end": measured[-1].pending_over_30_days
                if measured
                else None,
                "starved_origins": int(self.starved.sum()),
                "starvation_bound_days": self.starvation_bound_s / DAY_S,
                "beyond_max_interval": int(self.beyond_max_interval.sum()),
                "max_interval_days": self.max_interval_s / DAY_S,
            },
            "drift": self.drift(start_s, end_s),
            "save_code_now_hours": {
                **percentiles(self.request_latencies_s, HOUR_S, 50, 99),
                "requests_done": len(self.request_latencies_s),
                "to_start": percentiles(self.request_waits_s, HOUR_S, 50, 99),
            },
        }

    def _by_rate_class(self, measured: list[Sample], days: float) -> dict[str, Any]:
        """Per true-rate class: its live origins, their mean age, its share of the
        mean age (the shares add up to ``age_days``), and the measured recurrent
        visits a day, their useless share and their worker seconds a day."""
        out: dict[str, Any] = {}
        for c, name in enumerate(RATE_CLASSES):
            live = float(np.mean([s.live_by_rate_class[c] for s in measured])) if measured else 0
            share = float(np.mean([s.age_days_by_rate_class[c] for s in measured])) if live else 0
            everyone = float(np.mean([s.live for s in measured])) if measured else 0
            counts = self.by_rate_class.get(name, dict.fromkeys(_CLASS_COUNTS, 0.0))
            out[name] = {
                "live": live,
                "age_days": share * everyone / live if live else None,
                "age_share_days": share,
                "visits_per_day": counts["visits"] / days,
                "useless_ratio": counts["useless"] / counts["visits"] if counts["visits"] else None,
                "worker_s_per_day": counts["worker_s"] / days,
            }
        return out

    def drift(self, start_s: float, end_s: float) -> dict[str, dict[str, float | None]]:
        """Mean age and freshness over the middle and the last third of the run, and
        last / middle: on a stationary world a policy that holds keeps it near 1."""
        third = (end_s - start_s) / 3
        middle = [s for s in self.samples if start_s + third <= s.t < start_s + 2 * third]
        last = [s for s in self.samples if s.t >= start_s + 2 * third]
        out: dict[str, dict[str, float | None]] = {}
        for name, attr in (("age_days", "mean_age_days"), ("freshness", "freshness")):
            m = float(np.mean([getattr(s, attr) for s in middle])) if middle else None
            v = float(np.mean([getattr(s, attr) for s in last])) if last else None
            ratio = v / m if m and v is not None else None
            out[name] = {"middle_third": m, "last_third": v, "ratio": ratio}
        return out

    def _pending_changes(self, end_s: float) -> int:
        """Measured changes of live origins the archive still lacks at the end (their
        lag is unknown, so it is not in the lag figures)."""
        live = self.live(end_s)
        return sum(
            int(np.sum(o.changes[int(self.archived[o.index]) :] >= self.measure_from_s))
            for o in self.origins
            if live[o.index]
        )

    def _first_visits(self, start_s: float, end_s: float) -> dict[str, Any]:
        new = (self.appear > start_s) & np.isfinite(self.listed_at)
        new &= self.listed_at >= self.measure_from_s
        waits = self.first_visit_at[new] - self.listed_at[new]
        old_enough = self.listed_at[new] + FIRST_VISIT_LIMIT_S <= end_s
        return {
            **percentiles([float(w) for w in waits if np.isfinite(w)], HOUR_S, 50, 95, 99),
            "new_origins": int(new.sum()),
            "never_visited": int(np.sum(~np.isfinite(waits))),
            "not_visited_within_7_days": int(np.sum(old_enough & (waits > FIRST_VISIT_LIMIT_S))),
        }
