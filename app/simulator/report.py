"""The report of a run: the policy's figures beside the clairvoyant bound, as JSON and plots."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from app.domain.allocation import lateness_reference_s
from app.domain.visit_stats import FLOOR_MARGIN
from app.simulator.bound import Samples, clairvoyant_bound, origin_case
from app.simulator.engine import Simulation
from app.simulator.optimum import OptimumOrigin, rate_only_optimum
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
            "common_interval_days": _common_interval_days(sim, name),
            "policies": state.policies,
            **summary,
            "mirror_returned": dict(sorted(state.returned.items())),
            "journal_beyond_history": sim.beyond_history[name],
            "clairvoyant_bound": bound_section(name, sim, summary),
            **optimum_section(name, sim),
        }
    return {
        "simulated_days": days,
        "measured_days": (sim.end_s - sim.measure_from_s) / DAY_S,
        "steps": sim.steps,
        "requests_finished_in_postgres": sim.finished_requests,
        "visit_types": types,
        "config": sim.config.model_dump(mode="json"),
    }


def _common_interval_days(sim: Simulation, name: str) -> float | None:
    """age_optimal's interval of the fastest changers at the end, √(2μ), at most
    the floor (the floor: μ at its clamp, or infinite); None without a μ."""
    config = sim.configs.get(name)
    if config is None or config.age_multiplier_s2 is None:
        return None
    floor_s = config.max_interval_s * FLOOR_MARGIN
    return lateness_reference_s(config.age_multiplier_s2, floor_s) / DAY_S


def _utilisation(pool: WorkerPool, sim: Simulation) -> float | None:
    """Share of the recurrent workers' time spent visiting over the measured period."""
    capacity = pool.workers * (sim.end_s - sim.measure_from_s)
    return pool.busy_s / capacity if capacity > 0 else None


def bound_section(name: str, sim: Simulation, policy: dict[str, Any]) -> dict[str, Any]:
    """The clairvoyant lower bound on the mean age (``app.simulator.bound``) with the
    recurrent workers' whole time over the measured period, plus the worker time of
    the request visits (they archive changes too) and of one longest visit per
    worker (a visit that straddles the period's end); ``policy`` is the policy's
    summary, for the ratio."""
    state = sim.types[name]
    truth, loader = state.truth, sim.config.loader
    samples = _measured_samples(sim, name)
    cases = []
    for origin in truth.origins:
        case = origin_case(
            origin,
            float(truth.listed_at[origin.index]),
            samples,
            (sim.start_s, sim.measure_from_s),
            loader.scale * origin.size * loader.base_s,
            _change_costs_s(sim, origin),
        )
        if case is not None:
            cases.append(case)
    workers = state.recurrent.workers
    largest = max((o.size for o in truth.origins), default=1.0)
    budget = (
        workers * (sim.end_s - sim.measure_from_s)
        + state.requests.busy_s
        + workers * loader.scale * largest * loader.cap_s
    )
    bound = clairvoyant_bound(cases, samples, budget)
    days = (sim.end_s - sim.measure_from_s) / DAY_S
    return {
        **bound,
        "worker_s_per_day": budget / days if days > 0 else None,
        "policy_age_ratio": _ratio(policy["age_days"], bound["age_days"]),
    }


def _measured_samples(sim: Simulation, name: str) -> Samples:
    """The measured period's sample instants of a visit type, weighted as its mean age."""
    measured = [s for s in sim.types[name].truth.samples if s.t >= sim.measure_from_s]
    return Samples(
        np.array([s.t for s in measured], dtype=np.float64),
        np.array([s.live for s in measured], dtype=np.float64),
    )


def _change_costs_s(sim: Simulation, origin: Origin) -> np.ndarray[tuple[int], Any]:
    """Worker seconds of fetching each of the origin's changes (its commits, cut by
    the loader's cap)."""
    loader = sim.config.loader
    commits = np.diff(origin.commits, prepend=0).astype(np.float64)
    cut = np.minimum(loader.per_commit_s * commits, loader.cap_s - loader.base_s)
    costs: np.ndarray[tuple[int], Any] = loader.scale * origin.size * cut
    return costs


def optimum_section(name: str, sim: Simulation) -> dict[str, Any]:
    """The rate-only optimum (``app.simulator.optimum``) over the measured period:
    ``rate_only_optimum`` its mean age in days (None when infeasible, with
    ``rate_only_optimum_reason``), ``rate_only_optimum_budget`` the worker time it
    was given, the policy's recurrent worker time capped at the workers' capacity."""
    state = sim.types[name]
    truth, loader = state.truth, sim.config.loader
    period = (sim.measure_from_s, sim.end_s)
    origins = []
    for origin in truth.origins:
        live = (max(origin.appear_s, period[0]), min(origin.vanish_s, period[1] + 1))
        if origin.kind == "dead" or live[1] <= live[0]:
            continue
        window = (origin.changes >= period[0]) & (origin.changes <= period[1])
        window &= origin.changes < live[1]
        origins.append(
            OptimumOrigin(
                origin.index,
                *live,
                origin.wake_s,
                origin.rate_per_day / DAY_S,
                origin.changes,
                loader.scale * origin.size * loader.base_s,
                float(_change_costs_s(sim, origin)[window].sum()),
                None if origin.appear_s < period[0] else float(truth.listed_at[origin.index]),
            )
        )
    optimum = rate_only_optimum(
        origins,
        _measured_samples(sim, name),
        truth.max_interval_s * FLOOR_MARGIN,
        period,
        state.recurrent.busy_s,
        state.recurrent.workers * (period[1] - period[0]),
    )
    return {
        "rate_only_optimum": optimum.pop("age_days"),
        "rate_only_optimum_reason": optimum.pop("reason"),
        "rate_only_optimum_budget": optimum,
    }


def _ratio(value: float | None, bound: float | None) -> float | None:
    """``value / bound``; None when either is unknown or the bound is 0 (a ratio
    to nothing says nothing)."""
    if value is None or bound is None or bound <= 0:
        return None
    return value / bound


def write_report(report: dict[str, Any], sim: Simulation, out: Path) -> list[Path]:
    """Write the JSON report and the plots into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return [path, plot(sim, out / PLOT_FILE, report)]


def plot(sim: Simulation, path: Path, report: dict[str, Any] | None = None) -> Path:
    """Freshness, age, its tail, pending changes and pool sizes over time; with the
    report, the clairvoyant bound on the mean age as a dashed line of the visit
    type's colour."""
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
    for ax, (attr, title) in zip(axes.flat, panels, strict=False):
        for k, (name, state) in enumerate(sim.types.items()):
            samples = state.truth.samples
            days = [(s.t - sim.start_s) / DAY_S for s in samples]
            (line,) = ax.plot(days, [getattr(s, attr) for s in samples], label=name)
            best = None
            if report is not None and attr == "mean_age_days":
                best = report["visit_types"][name]["clairvoyant_bound"]["age_days"]
            if best is not None:
                ax.axhline(best, color=line.get_color(), linestyle="--", linewidth=1)
                ax.annotate(
                    f"{name} bound",
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
