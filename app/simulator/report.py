"""The report of a run: the policy's figures beside the optimum, as JSON and plots."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from app.simulator.config import Loader
from app.simulator.engine import Simulation
from app.simulator.optimum import Allocation, VisitCosts, allocate, mean_age, uniform
from app.simulator.truth import Truth
from app.simulator.workers import WorkerPool
from app.simulator.world import DAY_S, KINDS, Origin

REPORT_FILE = "report.json"
PLOT_FILE = "metrics.png"


def build_report(sim: Simulation, days: float) -> dict[str, Any]:
    """Everything a run measured, reproducible from the config and seed alone."""
    types = {}
    for name, state in sim.types.items():
        truth = state.truth
        summary = truth.summary(sim.start_s, sim.end_s)
        kinds = Counter(o.kind for o in state.world.origins)
        types[name] = {
            "origins": {
                "at_start": state.world.config.origins,
                "total": len(state.world.origins),
                "live_at_end": int(truth.live(sim.end_s).sum()),
                "by_kind": {k: kinds[k] for k in KINDS},
            },
            "workers": state.world.config.workers,
            "worker_utilisation": _utilisation(state.recurrent, sim),
            "policies": state.policies,
            **summary,
            "mirror_returned": dict(sorted(state.returned.items())),
            "journal_beyond_history": sim.beyond_history[name],
            "optimum": optimum_section(truth, sim, summary),
        }
    return {
        "simulated_days": days,
        "measured_days": (sim.end_s - sim.measure_from_s) / DAY_S,
        "steps": sim.steps,
        "requests_finished_in_postgres": sim.finished_requests,
        "visit_types": types,
        "config": sim.config.model_dump(mode="json"),
    }


def _utilisation(pool: WorkerPool, sim: Simulation) -> float | None:
    """Share of the recurrent workers' time spent visiting over the measured period."""
    capacity = pool.workers * (sim.end_s - sim.measure_from_s)
    return pool.busy_s / capacity if capacity > 0 else None


def visit_costs(loader: Loader, origins: list[Origin]) -> VisitCosts:
    """What a visit of each origin costs in worker seconds under the world's loader
    model (``Loader.visit_s``), for the optimum's worker-time budget, and the
    age the cap's backlog adds (``app.simulator.backlog``) where it can bind."""
    sizes = np.array([o.size for o in origins]) * loader.scale
    per_change = loader.per_commit_s * loader.commits_per_change
    costs = VisitCosts(sizes * loader.base_s, sizes * per_change, sizes * loader.cap_s)
    fetchable = loader.fetchable_commits()
    if not math.isfinite(fetchable) or fetchable < 1:
        return costs
    return costs.with_backlog(fetchable, loader.commits_per_change)


def optimum_section(truth: Truth, sim: Simulation, policy: dict[str, Any]) -> dict[str, Any]:
    """The optimal allocations of the visits' own worker time that the policy's
    recurrent visits used, over the origins live at the end, from their true
    change rates over the measured period, every origin visited at least once
    per ``max_interval`` as production's floor asks; ``policy`` is the policy's
    summary, for the ratios.

    What a schedule decides is how many visits, each with its fixed part: the
    commits are fetched whoever schedules (an origin visited below its knee
    falls behind for good). The optimum gets the policy's worker time less
    what its visits spent fetching commits and less the first fetch of new
    origins' history, plus what fetching every change at the true rates costs
    (``VisitCosts``). With commit fetching most of the worker time, the
    total alone would make the yardstick hang on how many changes the policy
    happened to fetch within the run."""
    floor = DAY_S / truth.max_interval_s
    bound_days = sim.config.starvation_bound_days
    live = np.flatnonzero(truth.live(sim.end_s))
    origins = [truth.origins[i] for i in live]
    # a first visit fetches the origin's whole history, however it is scheduled:
    # what is to allocate is the fixed part of the other visits
    visits = policy["visits"]
    overhead = max(
        0.0,
        visits["worker_s_per_day"]
        - visits["first_fetch_worker_s_per_day"]
        - visits["fetch_worker_s_per_day"],
    )
    rates = np.array([o.effective_rate(sim.measure_from_s, sim.end_s) for o in origins])
    costs = visit_costs(sim.config.loader, origins)
    fetch = float(np.sum(costs.per_change_s * rates))
    budget = overhead + fetch

    reported = truth.with_last_update[live]
    kinds = truth.kinds[live]

    def figures(a: Allocation) -> dict[str, Any]:
        return {
            "freshness": a.mean_freshness,
            "age_days": a.mean_age_days if np.isfinite(a.mean_age_days) else None,
            "age_days_by_lister": _ages_by_lister(rates, a, reported, costs),
            **_ages_by_kind(rates, a, kinds, costs),
            "starved_origins": a.starved(bound_days),
            "beyond_max_interval": a.starved(1 / floor),
            "visits_per_day": a.visits_per_day,
            "worker_s_per_day": a.worker_s_per_day,
            "feasible": a.feasible,
        }

    section: dict[str, Any] = {
        "capacity_worker_s_per_day": budget,
        "visits_worker_s_per_day": overhead,
        "fetch_worker_s_per_day": fetch,
        "policy_visits_per_day": policy["visits"]["per_day"],
        "floor_visits_per_day": floor,
        "origins": int(live.size),
    }
    for timing in ("even", "poisson"):
        kw: dict[str, Any] = {"costs": costs, "floor_per_day": floor}
        fresh = allocate(rates, budget, timing, "freshness", **kw)
        aged = allocate(rates, budget, timing, "age", **kw)
        section[timing] = {
            "max_freshness": figures(fresh),
            "min_age": figures(aged),
            "uniform": figures(uniform(rates, budget, timing, costs=costs)),
            "policy_freshness_ratio": _ratio(policy["freshness"], fresh.mean_freshness),
            "policy_age_ratio": _ratio(policy["age_days"], aged.mean_age_days),
        }
    return section


def _ages_by_lister(
    rates: np.ndarray[Any, Any],
    a: Allocation,
    reported: np.ndarray[Any, Any],
    costs: VisitCosts,
) -> dict[str, float | None]:
    """The allocation's mean age over the origins whose lister reports last_update
    and over the others (the optimum knows rates only: the two groups compare
    with the policy's own split)."""
    ages = mean_age(rates, a.freqs, a.timing, costs)
    out: dict[str, float | None] = {}
    for name, group in (("last_update", reported), ("no_last_update", ~reported)):
        value = float(np.mean(ages[group])) if group.any() else None
        out[name] = value if value is None or np.isfinite(value) else None
    return out


def _ages_by_kind(
    rates: np.ndarray[Any, Any], a: Allocation, kinds: np.ndarray[Any, Any], costs: VisitCosts
) -> dict[str, Any]:
    """The allocation's mean age over the origins of each kind, and over those that
    are not flaky (the optimum knows no failures: a flaky origin's failed visits
    rest the failed cooldown, 14 days by default, which no allocation shortens)."""
    ages = mean_age(rates, a.freqs, a.timing, costs)

    def mean(group: np.ndarray[Any, Any]) -> float | None:
        value = float(np.mean(ages[group])) if group.any() else None
        return value if value is None or np.isfinite(value) else None

    return {
        "age_days_by_kind": {str(k): mean(kinds == k) for k in np.unique(kinds)},
        "age_days_without_flaky": mean(kinds != "flaky"),
    }


def _optimum_value(
    report: dict[str, Any] | None, name: str, allocation: str, key: str
) -> float | None:
    if report is None:
        return None
    value = report["visit_types"][name]["optimum"]["even"][allocation][key]
    return None if value is None else float(value)


def _ratio(value: float | None, best: float) -> float | None:
    return None if value is None or best == 0 else value / best


def write_report(report: dict[str, Any], sim: Simulation, out: Path) -> list[Path]:
    """Write the JSON report and the plots into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return [path, plot(sim, out / PLOT_FILE, report)]


#: The optimum drawn beside the measured curves: (panel, allocation, figure).
OPTIMUM_LINES = (
    ("freshness", "max_freshness", "freshness"),
    ("mean_age_days", "min_age", "age_days"),
)


def plot(sim: Simulation, path: Path, report: dict[str, Any] | None = None) -> Path:
    """Freshness, age, its tail, pending changes and pool sizes over time; with the
    report, the optimum of the same worker time (evenly spaced visits, under the
    max_interval floor) as a dashed line of the visit type's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(12, 10), sharex=True)
    burn = (sim.measure_from_s - sim.start_s) / DAY_S
    panels = [
        ("freshness", "freshness"),
        ("mean_age_days", "mean age (days)"),
        ("age_p999_days", "age p99.9 (days)"),
        ("pending_over_30_days", "origins with a change pending > 30 days"),
    ]
    optimum = {panel: (alloc, key) for panel, alloc, key in OPTIMUM_LINES}
    for ax, (attr, title) in zip(axes.flat, panels, strict=False):
        for k, (name, state) in enumerate(sim.types.items()):
            samples = state.truth.samples
            days = [(s.t - sim.start_s) / DAY_S for s in samples]
            (line,) = ax.plot(days, [getattr(s, attr) for s in samples], label=name)
            best = _optimum_value(report, name, *optimum[attr]) if attr in optimum else None
            if best is not None:
                ax.axhline(best, color=line.get_color(), linestyle="--", linewidth=1)
                ax.annotate(
                    f"{name} optimum",
                    (days[-1 - (k % 4) * len(days) // 4] if days else 0, best),  # apart
                    fontsize="x-small",
                    ha="right",
                    va="bottom",
                )
        ax.set_title(title)
    for ax, (name, state) in zip(axes.flat[4:], sim.types.items(), strict=False):
        days = [(p["t"] - sim.start_s) / DAY_S for p in state.pools]
        for place in [k for k in state.pools[0] if k != "t"] if state.pools else []:
            ax.plot(days, [p[place] for p in state.pools], label=place)
        ax.set_title(f"{name}: mirror places")
        ax.legend(fontsize="small")
    for ax in axes.flat:
        ax.axvline(burn, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("simulated days")
    axes.flat[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
