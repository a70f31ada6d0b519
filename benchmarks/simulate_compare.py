"""Compare policy configurations on simulated worlds: worlds x seeds x policies.

    .venv/bin/python benchmarks/simulate_compare.py \\
        benchmarks/worlds/default.toml benchmarks/worlds/stationary.toml:180 \\
        --seeds 3 --jobs 2 \\
        --policies ref=reference --policies project=default \\
        --policies mix='{"seed000_mixing": 1}'

Each run is one ``revisit simulate`` of a world (``WORLD[:DAYS]``, 90 days
unless given) on its own throwaway PostgreSQL and Redis, with the world's seed
plus 0, 1, 2... and the policies of one configuration: ``NAME=world`` (the
file's own ``policies``), ``NAME=default`` (the project's defaults),
``NAME=reference`` (the reference's 49/49/2 weights, ``REFERENCE``, and its
flat failed cooldown: every failed visit rests ``failed_cooldown_s``),
``NAME=JSON`` with weights for every visit type, or ``NAME=JSON`` keyed by
visit type (``{"git": {...}, "hg": {...}}``). The first configuration is the
one of the "vs" column.

Beside them, every world and seed also runs the two baselines (``BASELINES``;
``--no-baselines`` leaves them out), inside the simulator, so that failures,
cooldowns, the loader's cap and the queue weigh on them as on the rest:
``round_robin`` (the origin longest without a successful visit first: every
origin equally often, no last_update) and ``oracle`` (the rate-only
age-optimal allocation of the true change rates, evenly spaced visits, no
last_update), both in ``app.simulator.oracle``. A third
configuration, ``oracle_planner``, is a diagnostic run only when named: the
default's own planning fed the true rates (``WorldConfig.oracle_rates``), whose
gap to the default is what learning the rates costs.

Prints one table per world: per configuration and visit type, the median over
the seeds of each figure (see ``FIGURES``; "age / best baseline" is the mean
age over the better baseline's of the same seed, "age / bound" over the
clairvoyant bound's, "age / rate-only optimum" over the rate-only optimum's,
"-" where it is infeasible; "best baseline" which baseline that was, over how many
seeds), with the load average beside the wall clock; writes
every run's report to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# This checkout's revisit, not the one a shared virtualenv was installed from
# (an editable install maps ``app`` to its own checkout): comparing two commits
# from two checkouts with one virtualenv would otherwise run the same code twice.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.domain.policies import check_policies
from app.services.context import Tuning
from app.simulator.config import WorldConfig, load_config

DEFAULT_DAYS = 90.0
WORLDS = Path(__file__).parent / "worlds"
#: The worlds run when none is named, with their length in days.
DEFAULT_WORLDS = (
    "default.toml",
    "dormant_bursts.toml",
    "no_last_update.toml",
    "heavy_tail.toml",
    "forge_outage.toml",
    "overload.toml",
    "stationary.toml:180",
)

#: The reference scheduler's default weights for git, hg and svn.
#: The reference's failed cooldown (swh-scheduler's grab_next_visits), the
#: rest after every failed visit there (s); revisit's default as the longest rest.
FLAT_FAILED_COOLDOWN_S = Tuning().failed_cooldown_s

REFERENCE = {
    "already_visited_order_by_lag": 49.0,
    "never_visited_oldest_update_first": 49.0,
    "origins_without_last_update": 2.0,
}
#: The baselines, run on every world and seed: name -> configuration.
BASELINES = {"round_robin": "round_robin", "oracle": "oracle"}
#: The configurations that are not weights.
KEYWORDS = ("world", "default", "reference", *BASELINES.values(), "oracle_planner")
Getter = Callable[[dict[str, Any]], Any]


def _over_best_baseline(report: dict[str, Any]) -> float | None:
    """Mean age over the better baseline's of the same world and seed (set by
    ``attach_baselines``)."""
    best = report.get("best_baseline_age_days")
    mine = report.get("age_days")
    return mine / best if mine is not None and best else None


def _over_rate_only_optimum(report: dict[str, Any]) -> float | None:
    """Mean age over the rate-only optimum's (None where it is infeasible)."""
    optimum = report.get("rate_only_optimum")
    mine = report.get("age_days")
    return mine / optimum if mine is not None and optimum else None


#: Column, figure of a visit type's report.
FIGURES: tuple[tuple[str, Getter], ...] = (
    ("mean age (d)", lambda r: r["age_days"]),
    ("age / best baseline", _over_best_baseline),
    ("age / bound", lambda r: r["clairvoyant_bound"]["policy_age_ratio"]),
    ("bound (d)", lambda r: r["clairvoyant_bound"]["age_days"]),
    ("age / rate-only optimum", _over_rate_only_optimum),
    ("rate-only optimum (d)", lambda r: r.get("rate_only_optimum")),
    ("age lu (d)", lambda r: r["age_days_by_lister"]["last_update"]),
    ("age no-lu (d)", lambda r: r["age_days_by_lister"]["no_last_update"]),
    ("utilisation", lambda r: r["worker_utilisation"]),
    ("√(2μ) at end (d)", lambda r: r.get("common_interval_days")),
    ("visits / day", lambda r: r["visits"]["per_day"]),
    ("freshness", lambda r: r["freshness"]),
    ("> max_interval", lambda r: r["starvation"]["beyond_max_interval"]),
    ("useless (last_update)", lambda r: r["useless_visits"]["ratio_where_last_update"]),
    ("of which floor", lambda r: r["useless_visits"].get("floor_share_where_last_update")),
    ("lag mean (d)", lambda r: r["lag_days"]["mean"]),
    ("1st visit p99 (h)", lambda r: r["first_visit_hours"]["p99"]),
    ("1st visit > 7 d", lambda r: r["first_visit_hours"]["not_visited_within_7_days"]),
    ("scn start p99 (h)", lambda r: r["save_code_now_hours"].get("to_start", {}).get("p99")),
    ("age drift", lambda r: r["drift"]["age_days"]["ratio"]),
)


@dataclass(frozen=True)
class Run:
    """One simulation: a world file, its length, a seed and a policy configuration."""

    world: str
    days: float
    seed: int
    name: str
    policies: Any
    """"world", "default", weights, or weights by visit type."""


def parse_world(arg: str) -> tuple[str, float]:
    """``PATH[:DAYS]``."""
    path, _, days = arg.partition(":")
    return path, float(days) if days else DEFAULT_DAYS


def parse_policies(arg: str) -> tuple[str, Any]:
    """``NAME=KEYWORD`` (``KEYWORDS``) or ``NAME=JSON``; the weights are checked."""
    name, sep, spec = arg.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{arg!r}: expected NAME={'|'.join(KEYWORDS)}|JSON")
    if spec in KEYWORDS:
        return name, spec
    try:
        weights = json.loads(spec)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{name}: not JSON ({exc})") from exc
    if not isinstance(weights, dict) or not weights:
        raise argparse.ArgumentTypeError(f"{name}: expected a JSON object of weights")
    per_type = weights if all(isinstance(v, dict) for v in weights.values()) else {"*": weights}
    try:
        for value in per_type.values():
            check_policies(value)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"{name}: {exc}") from exc
    return name, weights


def configure(config: WorldConfig, seed: int, spec: Any) -> WorldConfig:
    """``config`` with ``seed`` and the policies of ``spec`` for each visit type
    (``reference``: also the reference's flat failed cooldown; ``oracle``: the
    rate-only allocation of the true rates, with the defaults' cooldowns;
    ``oracle_planner``: the defaults, planned with the true rates)."""
    types = []
    settings = dict(config.settings)
    if spec == "reference":
        settings["failed_retry_s"] = settings.get("failed_cooldown_s", FLAT_FAILED_COOLDOWN_S)
    for vt in config.visit_types:
        if spec == "world":
            policies = vt.policies
        elif spec in ("default", "oracle_planner", *BASELINES.values()):
            # a baseline sends the recurrent visits itself; the defaults give it
            # the default's cooldowns (a failed fast changer rests its change interval)
            policies = None
        elif spec == "reference":
            policies = dict(REFERENCE)
        elif all(isinstance(v, dict) for v in spec.values()):
            policies = spec.get(vt.name, vt.policies)
        else:
            policies = spec
        types.append({**vt.model_dump(), "policies": policies})
    return WorldConfig.model_validate(
        {
            **config.model_dump(),
            "seed": seed,
            "visit_types": types,
            "settings": settings,
            "oracle_rates": spec == "oracle_planner",
            "rate_only_oracle": spec == "oracle",
            "round_robin": spec == "round_robin",
        }
    )


def run_one(run: Run) -> dict[str, Any]:
    """Run one simulation on throwaway services (in a worker process)."""
    from app.simulator.runner import run_world, throwaway_services

    config = configure(load_config(Path(run.world)), run.seed, run.policies)
    load_before = os.getloadavg()[0]
    with throwaway_services() as (conn, settings):
        _, report = run_world(conn, settings, config, run.days)
    report["run"]["load_average"] = [load_before, os.getloadavg()[0]]
    return {**asdict(run), "report": report}


def plan(worlds: list[str], seeds: int, configs: list[tuple[str, Any]]) -> Iterator[Run]:
    """Every run, seed by seed, world by world, configuration by configuration: the
    first seed of every world comes first, so a run cut short still covers
    every world."""
    parsed = [parse_world(arg) for arg in worlds]
    bases = [load_config(Path(path)).seed for path, _ in parsed]
    for k in range(seeds):
        for (path, days), base in zip(parsed, bases, strict=True):
            for name, spec in configs:
                yield Run(path, days, base + k, name, spec)


def run_all(runs: list[Run], jobs: int, console: Console, out: Path) -> list[dict[str, Any]]:
    """Run everything, ``jobs`` at a time, reporting each run as it ends and
    rewriting ``out`` with the runs done so far; the results in the order of
    ``runs``."""
    results: list[dict[str, Any] | None] = [None] * len(runs)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_one, run): k for k, run in enumerate(runs)}
        for done, future in enumerate(as_completed(futures), start=1):
            run = runs[futures[future]]
            result = results[futures[future]] = future.result()
            wall = result["report"]["run"]["wall_clock_s"]
            load = result["report"]["run"]["load_average"][1]
            console.print(
                f"[{done}/{len(runs)}] {Path(run.world).stem} seed {run.seed} "
                f"{run.name}: {wall:.0f} s (load {load:.1f})"
            )
            write_results(out, [r for r in results if r is not None])
    return [r for r in results if r is not None]


def write_results(path: Path, results: list[dict[str, Any]]) -> None:
    """Every run's configuration and report, as JSON."""
    path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


def median(values: list[Any]) -> float | None:
    """Median of the values that exist (None if none does)."""
    present = [float(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def attach_baselines(results: list[dict[str, Any]]) -> None:
    """Note in each visit type's figures the mean age of the better baseline run
    on the same world, length and seed (``best_baseline_age_days``), and which
    baseline that was (``best_baseline``)."""
    best: dict[tuple[str, float, int, str], tuple[float, str]] = {}
    for result in results:
        if result["policies"] not in BASELINES.values():
            continue
        for vt, figures in result["report"]["visit_types"].items():
            key = (result["world"], result["days"], result["seed"], vt)
            if figures["age_days"] is not None:
                mine = (figures["age_days"], result["name"])
                best[key] = min(best.get(key, (math.inf, "")), mine)
    for result in results:
        for vt, figures in result["report"]["visit_types"].items():
            key = (result["world"], result["days"], result["seed"], vt)
            age, name = best.get(key, (None, None))
            figures["best_baseline_age_days"] = age
            figures["best_baseline"] = name


def _best_baselines(runs: list[dict[str, Any]]) -> str:
    """Which baseline was the better one, and over how many seeds: "oracle 2, round_robin 1"."""
    counts = Counter(f["best_baseline"] for f in runs if f.get("best_baseline"))
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "-"


def summarise(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """World -> "configuration / visit type" -> figure -> median over the seeds."""
    attach_baselines(results)
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for result in results:
        world = f"{Path(result['world']).stem} ({result['days']:g} days)"
        for vt, figures in result["report"]["visit_types"].items():
            key = f"{result['name']} / {vt}"
            grouped.setdefault(world, {}).setdefault(key, []).append(figures)
    return {
        world: {
            key: {label: median([get(f) for f in runs]) for label, get in FIGURES}
            | {"runs": len(runs), "best baseline": _best_baselines(runs)}
            for key, runs in rows.items()
        }
        for world, rows in grouped.items()
    }


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.3g}"


def world_table(world: str, rows: dict[str, dict[str, Any]], baseline: str) -> Table:
    """The medians of one world, a column per configuration and visit type; "age vs"
    is the mean age over the baseline configuration's."""
    table = Table("median over the seeds", *rows, title=world)
    versus = []
    for key, figures in rows.items():
        base = rows.get(f"{baseline} / {key.partition(' / ')[2]}", {}).get("mean age (d)")
        own = figures["mean age (d)"]
        versus.append(_fmt(own / base if own is not None and base else None))
    table.add_row("runs", *(str(figures["runs"]) for figures in rows.values()))
    table.add_row("best baseline", *(figures["best baseline"] for figures in rows.values()))
    for label, _ in FIGURES:
        table.add_row(label, *(_fmt(figures[label]) for figures in rows.values()))
    table.add_row(f"age vs {baseline}", *versus)
    return table


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("worlds", nargs="*", help="WORLD[:DAYS] (default: benchmarks/worlds)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per world (default 3)")
    parser.add_argument(
        "--policies",
        action="append",
        type=parse_policies,
        metavar="NAME=SPEC",
        help="a configuration: world, default, reference, oracle_planner or JSON weights "
        "(repeatable; default: world)",
    )
    parser.add_argument(
        "--no-baselines", action="store_true", help="run only the configurations named"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--json", type=Path, default=Path("simulate-compare.json"))
    parser.add_argument(
        "--tables-only", action="store_true", help="print the tables of --json, run nothing"
    )
    args = parser.parse_args(argv)
    console = Console(width=160)
    if args.tables_only:
        results = json.loads(args.json.read_text())
        print_tables(results, results[0]["name"] if results else "", console)
        return 0
    worlds = args.worlds or [str(WORLDS / w) for w in DEFAULT_WORLDS]
    configs = args.policies or [("world", "world")]
    baselines = [] if args.no_baselines else list(BASELINES.items())
    runs = list(plan(worlds, args.seeds, configs + baselines))
    console.print(f"{len(runs)} runs, {args.jobs} at a time, load {os.getloadavg()[0]:.1f}")
    started = time.monotonic()
    results = run_all(runs, args.jobs, console, args.json)
    print_tables(results, configs[0][0], console)
    console.print(f"all runs {time.monotonic() - started:.0f} s; wrote {args.json}")
    return 0


def print_tables(results: list[dict[str, Any]], baseline: str, console: Console) -> None:
    """One table per world, then the wall clock of a run and the load beside it."""
    for world, rows in summarise(results).items():
        console.print(world_table(world, rows, baseline))
    walls = [r["report"]["run"]["wall_clock_s"] for r in results]
    loads = [r["report"]["run"]["load_average"][1] for r in results]
    if walls:
        console.print(
            f"wall clock per run: median {statistics.median(walls):.0f} s, "
            f"max {max(walls):.0f} s (load average median {statistics.median(loads):.1f})"
        )


if __name__ == "__main__":
    sys.exit(main())
