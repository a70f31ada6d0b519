"""``revisit lister`` and ``revisit rpc``: lister instances, their schedules, runs,
scheduler and worker, and the RPC server of the reference lister interface."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli.common import console, fail, now, parse_duration, refusing
from app.cli.processes import become, exec_dramatiq, port_free
from app.db.connection import connect
from app.db.lister_runs import all_schedules, lister_overview, recent_runs
from app.db.listings import register_lister
from app.domain.lister_schedule import ScheduleError
from app.domain.queue_names import LISTER_QUEUE
from app.settings import get_settings

lister_app = typer.Typer(rich_markup_mode=None, help="Lister instances.", no_args_is_help=True)


def rpc() -> None:
    """Serve the reference scheduler's RPC protocol (lister interface) on
    REVISIT_RPC_HOST:REVISIT_RPC_PORT (127.0.0.1:5008)."""
    settings = get_settings()
    port_free(settings.rpc_port, settings.rpc_host, "REVISIT_RPC_PORT", "serve the RPC")
    port_free(settings.metrics_port, settings.metrics_address, "REVISIT_METRICS_PORT")
    become("actors", "rpc")


@lister_app.command("register")
def lister_register(
    name: str,
    instance: str,
    first_visits_queue_prefix: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Register a lister instance (NAME INSTANCE); print its id."""
    with connect(get_settings()) as conn:
        lister_id = register_lister(conn, name, instance, first_visits_queue_prefix)
    console.print(str(lister_id))


def parse_arguments(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value that reads as JSON (a number, true) is taken as such."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"--arg: expected KEY=VALUE, got {pair!r}")
        try:
            arguments[key] = json.loads(value)
        except json.JSONDecodeError:
            arguments[key] = value
    return arguments


@lister_app.command("schedule")
def lister_schedule(
    name: Annotated[str, typer.Argument(help="installed lister (entry point revisit.listers)")],
    instance: str,
    every: Annotated[
        str | None,
        typer.Option(help="time between full listings, at least 1m (new schedule: 1d)"),
    ] = None,
    incremental_every: Annotated[
        str | None,
        typer.Option(help="time between incremental listings, shorter than --every (0: none)"),
    ] = None,
    arg: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE argument of the lister; given, they replace the stored ones"),
    ] = None,
    start_in: Annotated[str | None, typer.Option(help="next full run after this delay")] = None,
) -> None:
    """Schedule lister NAME for INSTANCE, or change its schedule: what is not given
    keeps its value (a paused schedule stays paused)."""
    from app.listers.plugin import UnknownListerPlugin
    from app.listers.runs import schedule_lister

    full = _interval(every, "--every", positive=True)
    incremental = _interval(incremental_every, "--incremental-every")
    started = now()
    delay = _interval(start_in, "--start-in", positive=True)
    first_run = started + delay if delay is not None else None
    with connect(get_settings()) as conn, refusing(UnknownListerPlugin, prefix="NAME: "):
        try:
            done = schedule_lister(
                conn,
                name,
                instance,
                started,
                arguments=None if arg is None else parse_arguments(arg),
                full_interval=full,
                incremental_interval=incremental,
                first_run=first_run,
            )
        except ScheduleError as exc:
            raise fail(f"--{exc.field}: {exc.reason}") from exc
    s = done.schedule
    line = f"{name}/{instance} ({done.lister_id}) {'scheduled' if done.created else 'changed'}:"
    line += f" full every {s.full_interval}, next {_when(s.next_full_run)}"
    if s.incremental_interval:
        line += f"; incremental every {s.incremental_interval}"
    if not done.enabled:
        line += f" (paused: revisit lister resume {name} {instance})"
    console.print(line, highlight=False)


def _interval(text: str | None, option: str, positive: bool = False) -> timedelta | None:
    return timedelta(seconds=parse_duration(text, option, positive)) if text else None


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _intervals(s: dict[str, Any]) -> str:
    incremental = s["incremental_interval"]
    return f"full {s['full_interval']}" + (f", incremental {incremental}" if incremental else "")


def _next_run(s: dict[str, Any]) -> datetime | None:
    return min((t for t in (s["next_full_run"], s["next_incremental_run"]) if t), default=None)


@lister_app.command("list")
def lister_list() -> None:
    """Lister instances: schedule, last run (outcome, origins listed), next run."""
    with connect(get_settings()) as conn:
        rows = lister_overview(conn)
    columns = ("lister", "schedule", "last run", "outcome", "origins listed", "next run")
    table = Table(*columns, "failures")
    for r in rows:
        schedule = "-"
        if r["full_interval"] is not None:
            schedule = _intervals(r) + ("" if r["enabled"] else " (paused)")
        outcome = r["run_status"] or "-"
        if r["error"]:
            outcome += f": {r['error'][:80]}"
        table.add_row(
            f"{r['name']}/{r['instance_name']}",
            schedule,
            _when(r["finished_at"] or r["scheduled_at"]),
            outcome,
            str(r["origins_listed"]) if r["run_id"] else "-",
            _when(_next_run(r)) if r["enabled"] else "-",
            str(r["failures_in_a_row"] or 0),
        )
    console.print(table)


def _runs_table(rows: list[dict[str, Any]], schedules: dict[Any, dict[str, Any]]) -> Table:
    """One line per run; with ``schedules``, a schedule's columns on its first line."""
    columns = ["lister", *(["schedule", "state", "next due"] if schedules else [])]
    columns += ["run", "kind", "status", "started", "ended", "origins listed", "error"]
    table = Table(*columns)
    shown: set[Any] = set()
    for r in rows:
        cells = [f"{r['name']}/{r['instance_name']}" if r["lister_id"] not in shown else ""]
        if schedules:
            s = schedules[r["lister_id"]]
            cells += _schedule_cells(s) if r["lister_id"] not in shown else ["", "", ""]
        shown.add(r["lister_id"])
        if r["id"] is None:
            table.add_row(*cells, *["-"] * 7)
            continue
        cells += [
            str(r["id"]),
            "full" if r["full_listing"] else "incremental",
            r["status"],
            _when(r["started_at"]),
            _when(r["finished_at"]),
            str(r["origins_listed"]),
            (r["error"] or "")[:120],
        ]
        table.add_row(*cells)
    return table


def _schedule_cells(s: dict[str, Any]) -> list[str]:
    schedule = _intervals(s)
    arguments = " ".join(f"{k}={json.dumps(v)}" for k, v in s["arguments"].items())
    state = "paused" if not s["enabled"] else "active"
    if s["running_run_id"] is not None:
        state += f", run {s['running_run_id']} out"
    if s["failures_in_a_row"]:
        state += f", {s['failures_in_a_row']} failures in a row"
    due = _when(_next_run(s)) if s["enabled"] else "- (paused)"
    return [f"{schedule}\n{arguments}" if arguments else schedule, state, due]


@lister_app.command("schedules")
def lister_schedules(
    runs: Annotated[int, typer.Option(min=1, max=100, help="latest runs shown per schedule")] = 3,
) -> None:
    """Every lister schedule: intervals, arguments, paused or not, next due time,
    and its latest runs (status, started, ended, origins listed, error)."""
    with connect(get_settings()) as conn:
        schedules = {s["lister_id"]: s for s in all_schedules(conn)}
        by_lister: dict[Any, list[dict[str, Any]]] = {}
        for r in recent_runs(conn, None, None, runs):
            by_lister.setdefault(r["lister_id"], []).append(r)
    rows: list[dict[str, Any]] = []
    for lister_id, s in schedules.items():
        none = {"lister_id": lister_id, "id": None, **s}
        rows += by_lister.get(lister_id) or [none]
    console.print(_runs_table(rows, schedules))


@lister_app.command("runs")
def lister_runs(
    name: str,
    instance: Annotated[str | None, typer.Argument(help="(default: every instance)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="latest runs per instance")] = 20,
) -> None:
    """The latest runs of lister NAME (of its INSTANCE), newest first."""
    with connect(get_settings()) as conn:
        rows = recent_runs(conn, name, instance, limit)
    if not rows:
        shown = f"{name}/{instance}" if instance else name
        raise fail(f"NAME: no run of lister {shown} is recorded", code=1)
    console.print(_runs_table(rows, {}))


def _change(name: str, instance: str, action: str) -> None:
    from app.listers.runs import NoSchedule, pause_lister, unschedule_lister

    with connect(get_settings()) as conn, refusing(NoSchedule, prefix="NAME INSTANCE: ", code=1):
        if action == "unscheduled":
            unschedule_lister(conn, name, instance, now())
        else:
            pause_lister(conn, name, instance, paused=action == "paused")
    console.print(f"{name}/{instance}: {action}", highlight=False)


@lister_app.command("pause")
def lister_pause(name: str, instance: str) -> None:
    """Send no run of this schedule until resumed (the lister scheduler's next
    step on); a run already out ends as usual."""
    _change(name, instance, "paused")


@lister_app.command("resume")
def lister_resume(name: str, instance: str) -> None:
    """Send this schedule's runs again; a run that fell due while paused is sent at once."""
    _change(name, instance, "resumed")


@lister_app.command("unschedule")
def lister_unschedule(name: str, instance: str) -> None:
    """Remove this schedule; its runs' history and the lister's origins stay
    (a run still out is marked lost)."""
    _change(name, instance, "unscheduled")


@lister_app.command("scheduler")
def lister_scheduler() -> None:
    """Run the lister scheduler: send each scheduled lister's due runs to the lister queue."""
    become("actors", "lister-scheduler")


@lister_app.command("worker")
def lister_worker(threads: Annotated[int, typer.Option(min=1)] = 2) -> None:
    """Run Dramatiq workers for the lister queue (revisit.listers)."""
    exec_dramatiq("actors.listers", 1, threads, [LISTER_QUEUE])
