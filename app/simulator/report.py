"""The report of a run: the policy's figures beside the optimum, as JSON and plots."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from app.simulator.engine import Simulation
from app.simulator.optimum import Allocation, allocate, uniform
from app.simulator.truth import Truth
from app.simulator.world import DAY_S, KINDS

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


def optimum_section(truth: Truth, sim: Simulation, policy: dict[str, Any]) -> dict[str, Any]:
    """The four optimal allocations of the policy's capacity (its recurrent visits
    per day) over the origins live at the end, from their true change rates over
    the measured period; ``policy`` is the policy's summary, for the ratios."""
    capacity = float(policy["visits"]["per_day"])
    bound_days = sim.config.starvation_bound_days
    live = np.flatnonzero(truth.live(sim.end_s))
    rates = np.array([truth.origins[i].effective_rate(sim.measure_from_s, sim.end_s) for i in live])

    def figures(a: Allocation) -> dict[str, Any]:
        return {
            "freshness": a.mean_freshness,
            "age_days": a.mean_age_days if np.isfinite(a.mean_age_days) else None,
            "starved_origins": a.starved(bound_days),
        }

    section: dict[str, Any] = {"capacity_visits_per_day": capacity, "origins": int(live.size)}
    for timing in ("even", "poisson"):
        fresh = allocate(rates, capacity, timing, "freshness")
        aged = allocate(rates, capacity, timing, "age")
        section[timing] = {
            "max_freshness": figures(fresh),
            "min_age": figures(aged),
            "uniform": figures(uniform(rates, capacity, timing)),
            "policy_freshness_ratio": _ratio(policy["freshness"], fresh.mean_freshness),
            "policy_age_ratio": _ratio(policy["age_days"], aged.mean_age_days),
        }
    return section


def _ratio(value: float | None, best: float) -> float | None:
    return None if value is None or best == 0 else value / best


def write_report(report: dict[str, Any], sim: Simulation, out: Path) -> list[Path]:
    """Write the JSON report and the plots into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return [path, plot(sim, out / PLOT_FILE)]


def plot(sim: Simulation, path: Path) -> Path:
    """Freshness, age, its tail, pending changes and pool sizes over time."""
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
        for name, state in sim.types.items():
            samples = state.truth.samples
            days = [(s.t - sim.start_s) / DAY_S for s in samples]
            ax.plot(days, [getattr(s, attr) for s in samples], label=name)
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
