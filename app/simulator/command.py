"""``revisit simulate``: run a world file, show progress, write the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from app.simulator.config import WorldConfig, load_config
from app.simulator.report import write_report
from app.simulator.runner import run_world, throwaway_services
from app.simulator.world import DAY_S


def simulate(
    config_path: Path, days: float, out: Path, seed: int | None, console: Console
) -> dict[str, Any]:
    """Run the world in ``config_path`` for ``days`` on throwaway services; write
    ``report.json`` and ``metrics.png`` into ``out``; return the report."""
    config = load_config(config_path)
    if seed is not None:
        config = WorldConfig.model_validate({**config.model_dump(), "seed": seed})
    start = config.start.timestamp()
    columns = (
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("day {task.completed:.1f}/{task.total:g}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with throwaway_services() as (conn, settings), Progress(*columns, console=console) as bar:
        task = bar.add_task("simulate", total=days)
        sim, report = run_world(
            conn,
            settings,
            config,
            days,
            lambda t: bar.update(task, completed=min(days, (t - start) / DAY_S)),
        )
    files = write_report(report, sim, out)
    console.print(summary_table(report))
    for path in files:
        console.print(f"wrote {path}")
    return report


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def summary_table(report: dict[str, Any]) -> Table:
    """The headline figures of each visit type, with the clairvoyant bound on the
    mean age beside them (``app.simulator.bound``)."""
    types = report["visit_types"]
    table = Table("figure", *types, title=f"after {report['measured_days']:g} measured days")
    rows: list[tuple[str, Any]] = [
        ("visits per day", lambda r: r["visits"]["per_day"]),
        ("worker hours per day", lambda r: r["visits"]["worker_s_per_day"] / 3600),
        ("worker utilisation", lambda r: r["worker_utilisation"]),
        ("freshness", lambda r: r["freshness"]),
        ("mean age (days)", lambda r: r["age_days"]),
        ("  clairvoyant bound", lambda r: r["clairvoyant_bound"]["age_days"]),
        ("  policy / bound", lambda r: r["clairvoyant_bound"]["policy_age_ratio"]),
        ("lag mean / p99 (days)", lambda r: (r["lag_days"]["mean"], r["lag_days"]["p99"])),
        ("useless visits", lambda r: r["useless_visits"]["ratio"]),
        ("  share of worker time", lambda r: r["useless_visits"]["worker_time_share"]),
        (
            "first visit p50 / p99 (h)",
            lambda r: (r["first_visit_hours"]["p50"], r["first_visit_hours"]["p99"]),
        ),
        (
            "age p99.9 / max (days)",
            lambda r: (r["starvation"]["age_p999_days"], r["starvation"]["age_max_days"]),
        ),
        ("pending > 30 days", lambda r: r["starvation"]["pending_over_30_days"]),
        ("starved (no success for > 30 days)", lambda r: r["starvation"]["starved_origins"]),
        ("no success for > max_interval", lambda r: r["starvation"]["beyond_max_interval"]),
        (
            "drift of mean age / freshness",
            lambda r: (r["drift"]["age_days"]["ratio"], r["drift"]["freshness"]["ratio"]),
        ),
        (
            "save code now p50 / p99 (h)",
            lambda r: (r["save_code_now_hours"]["p50"], r["save_code_now_hours"]["p99"]),
        ),
    ]
    for label, get in rows:
        cells = []
        for figures in types.values():
            value = get(figures)
            cells.append(
                " / ".join(_fmt(v) for v in value) if isinstance(value, tuple) else _fmt(value)
            )
        table.add_row(label, *cells)
    return table
