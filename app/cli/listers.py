"""``revisit`` commands of the lister processes: the RPC server, lister schedules,
runs and their worker. Registered on the main app by ``app.cli``."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from app.cli.processes import become, exec_dramatiq, port_free
from app.db.connection import connect
from app.settings import get_settings

console = Console() if sys.stdout.isatty() else Console(width=240)
err = Console(stderr=True, soft_wrap=True)
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def rpc() -> None:
    """Serve the reference scheduler's RPC protocol (lister interface) on
    REVISIT_RPC_HOST:REVISIT_RPC_PORT (127.0.0.1:5008)."""
    settings = get_settings()
    port_free(settings.rpc_port, settings.rpc_host, "REVISIT_RPC_PORT", "serve the RPC")
    port_free(settings.metrics_port, settings.metrics_address, "REVISIT_METRICS_PORT")
    become("actors", "rpc")


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(2)


def parse_duration(text: str, option: str) -> timedelta:
    """``90``, ``30s``, ``15m``, ``6h`` or ``1d`` as a timedelta; bad text names the option."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match or float(match[1]) <= 0:
        raise _fail(f"{option}: expected a positive duration like 30s, 15m, 6h or 1d, got {text!r}")
    return timedelta(seconds=float(match[1]) * _UNITS_S[match[2] or "s"])


def parse_arguments(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value that reads as JSON (a number, true) is taken as such."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _fail(f"--arg: expected KEY=VALUE, got {pair!r}")
        try:
            arguments[key] = json.loads(value)
        except json.JSONDecodeError:
            arguments[key] = value
    return arguments


def lister_schedule(
    name: Annotated[str, typer.Argument(help="installed lister (entry point revisit.listers)")],
    instance: str,
    every: Annotated[str, typer.Option(help="time between full listings")] = "1d",
    incremental_every: Annotated[
        str | None, typer.Option(help="time between incremental listings (default: none)")
    ] = None,
    arg: Annotated[list[str] | None, typer.Option(help="KEY=VALUE argument of the lister")] = None,
    start_in: Annotated[str | None, typer.Option(help="first full run after this delay")] = None,
) -> None:
    """Run lister NAME for INSTANCE recurrently (lister worker and scheduler processes)."""
    from app.listers.plugin import UnknownListerPlugin
    from app.listers.runs import schedule_lister

    full = parse_duration(every, "--every")
    incremental = (
        parse_duration(incremental_every, "--incremental-every") if incremental_every else None
    )
    first_run = datetime.now(tz=UTC) + (
        parse_duration(start_in, "--start-in") if start_in else timedelta()
    )
    with connect(get_settings()) as conn:
        try:
            lister_id = schedule_lister(
                conn, name, instance, parse_arguments(arg or []), full, incremental, first_run
            )
        except UnknownListerPlugin as exc:
            raise _fail(f"NAME: {exc}") from exc
    console.print(
        f"{name}/{instance} ({lister_id}): full every {full}, first run {first_run:%H:%M:%S}"
    )


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def lister_list() -> None:
    """Lister instances: schedule, last run (outcome, origins listed), next run."""
    from app.db.lister_runs import lister_overview

    with connect(get_settings()) as conn:
        rows = lister_overview(conn)
    table = Table()
    columns = (
        "lister",
        "schedule",
        "last run",
        "outcome",
        "origins listed",
        "next run",
        "failures",
    )
    for column in columns:
        table.add_column(column)
    for r in rows:
        schedule = "-"
        if r["full_interval"] is not None:
            schedule = f"full {r['full_interval']}"
            if r["incremental_interval"]:
                schedule += f", incremental {r['incremental_interval']}"
            if not r["enabled"]:
                schedule += " (disabled)"
        outcome = r["run_status"] or "-"
        if r["error"]:
            outcome += f": {r['error'][:80]}"
        upcoming = [t for t in (r["next_full_run"], r["next_incremental_run"]) if t is not None]
        table.add_row(
            f"{r['name']}/{r['instance_name']}",
            schedule,
            _when(r["finished_at"] or r["scheduled_at"]),
            outcome,
            str(r["origins_listed"]) if r["run_id"] else "-",
            _when(min(upcoming)) if upcoming and r["enabled"] else "-",
            str(r["failures_in_a_row"] or 0),
        )
    console.print(table)


def lister_scheduler() -> None:
    """Run the lister scheduler: send each scheduled lister's due runs to the lister queue."""
    become("actors", "lister-scheduler")


def lister_worker(threads: Annotated[int, typer.Option(min=1)] = 2) -> None:
    """Run Dramatiq workers for the lister queue (revisit.listers)."""
    from app.domain.queue_names import LISTER_QUEUE

    exec_dramatiq("actors.listers", 1, threads, [LISTER_QUEUE])


def register(app: typer.Typer, lister_app: typer.Typer) -> None:
    """Add these commands to the ``revisit`` app and its ``lister`` group."""
    app.command("rpc")(rpc)
    lister_app.command("schedule")(lister_schedule)
    lister_app.command("list")(lister_list)
    lister_app.command("scheduler")(lister_scheduler)
    lister_app.command("worker")(lister_worker)
