"""The ``revisit`` command line."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from app.cli_listers import register as register_lister_commands
from app.context import Context
from app.db.connection import connect
from app.db.listings import UnknownLister, find_lister, register_lister
from app.db.migrate import migrate
from app.listing_input import ListingInputError
from app.settings import Settings, get_settings

app = typer.Typer(
    help="revisit: decides which software origin each loader visits next.", no_args_is_help=True
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
lister_app = typer.Typer(help="Lister instances.", no_args_is_help=True)
origins_app = typer.Typer(help="Listed origins.", no_args_is_help=True)
origin_app = typer.Typer(help="One origin.", no_args_is_help=True)
mirror_app = typer.Typer(help="The Redis mirror of the scheduling pools.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(lister_app, name="lister")
app.add_typer(origins_app, name="origins")
app.add_typer(origin_app, name="origin")
app.add_typer(mirror_app, name="mirror")
request_app = typer.Typer(help="One-shot visit requests (save code now).", no_args_is_help=True)
policy_app = typer.Typer(help="Scheduling policies per visit type.", no_args_is_help=True)
app.add_typer(request_app, name="request")
app.add_typer(policy_app, name="policy")

# Piped output (scripts, tests) gets wide tables rather than truncated cells.
console = Console() if sys.stdout.isatty() else Console(width=240)
err = Console(stderr=True, soft_wrap=True)


def _now() -> datetime:
    return datetime.now(tz=UTC)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


def _visit_types(settings: Settings, visit_type: str | None) -> list[str]:
    if visit_type is None:
        return list(settings.visit_types)
    if visit_type not in settings.visit_types:
        raise _fail(
            f"VISIT_TYPE: unknown visit type {visit_type!r} "
            f"(configured: {', '.join(settings.visit_types)})"
        )
    return [visit_type]


def _split_lister(lister: str) -> tuple[str, str]:
    name, sep, instance = lister.partition("/")
    if not sep or not name or not instance:
        raise _fail(f"--lister: expected NAME/INSTANCE, got {lister!r}")
    return name, instance


@db_app.command("init")
def db_init() -> None:
    """Create the schema in an empty database (same as migrate)."""
    db_migrate()


@db_app.command("migrate")
def db_migrate(
    to: Annotated[int | None, typer.Option(help="stop at this version", min=1)] = None,
) -> None:
    """Apply the pending schema migrations."""
    applied = migrate(get_settings().database_dsn(), to)
    if applied:
        for m in applied:
            console.print(f"applied migration {m.version:04d} {m.name}")
    else:
        console.print("schema is up to date")


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


@origins_app.command("import")
def origins_import(
    file: Annotated[str, typer.Argument(help="listing file, or - for standard input")],
    lister: Annotated[str, typer.Option(help="NAME/INSTANCE of a registered lister")],
    csv_format: Annotated[
        bool, typer.Option("--csv", help="CSV with a header line instead of JSON lines")
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="a full listing: disable the lister's unseen origins")
    ] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="lines per transaction")] = 50_000,
    writers: Annotated[
        int, typer.Option(min=1, max=8, help="Postgres connections writing batches at once")
    ] = 2,
) -> None:
    """Record listed origins in batches; a bad line refuses its whole batch.

    With --full, the lister's origins missing from the file are disabled,
    unless some batch was refused (the listing is then incomplete).
    """
    from app.listing import finish_listing, import_listing, start_listing
    from app.listing_input import batches

    name, instance = _split_lister(lister)
    settings = get_settings()
    ctx = Context.from_settings(settings)
    try:
        handle = sys.stdin if file == "-" else Path(file).open()  # noqa: SIM115
    except OSError as exc:
        raise _fail(f"FILE: cannot read {file}: {exc.strerror}") from exc
    with connect(settings) as conn, handle:
        try:
            lister_id = find_lister(conn, name, instance)["id"]
        except UnknownLister as exc:
            raise _fail(f"--lister: {exc}") from exc
        started = start_listing(conn, lister_id, _now())
        parsed = batches(handle, batch_size, csv_format=csv_format)
        extra = [connect(settings) for _ in range(writers - 1)]
        try:
            report = import_listing(conn, ctx, lister_id, parsed, _now, extra)
        finally:
            for connection in extra:
                connection.close()
        for refused_batch in report.refused:
            _report(refused_batch, file)
        recorded, refused = report.recorded, len(report.refused)
        disabled = 0
        if not refused:
            disabled = finish_listing(conn, ctx, lister_id, started, _now(), full=full)
    console.print(
        f"imported {recorded} origins for {name}/{instance}"
        + (f", disabled {disabled} unseen" if full and not refused else "")
    )
    if refused:
        raise _fail(
            f"{refused} batch(es) refused, nothing of them written"
            + ("; unseen origins were not disabled" if full else "")
        )


def _report(exc: ListingInputError, file: str) -> None:
    for error in exc.errors:
        err.print(f"{file}: {error}")


@app.command("schedule")
def schedule(
    visit_type: str,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="only show what would be picked")
    ] = False,
    n: Annotated[int, typer.Option("-n", min=1, help="how many visits")] = 10,
) -> None:
    """Show (--dry-run) or schedule the next N visits of VISIT_TYPE, with the
    policy that picks each."""
    from app.db.policies import policies_of
    from app.scheduling import schedule_step

    settings = get_settings()
    _visit_types(settings, visit_type)
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        policies = policies_of(conn, visit_type)
        result = schedule_step(conn, ctx, visit_type, n, _now(), policies, dry_run=dry_run)
    if not dry_run:
        console.print(
            f"recorded {len(result.orders)} visits of {visit_type} as scheduled; "
            "the scheduler process sends visits to workers"
        )
        return
    table = Table("#", "url", "policy")
    for rank, order in enumerate(result.orders):
        table.add_row(str(rank), order.url, order.policy)
    console.print(table)


@origin_app.command("show")
def origin_show(
    url: str,
    visit_type: Annotated[str | None, typer.Option(help="only this visit type")] = None,
) -> None:
    """Where an origin stands: listing, visit stats, place and rank in the mirror."""
    from app.introspection import describe_origin

    settings = get_settings()
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        reports = describe_origin(conn, ctx, url, visit_type)
    if not reports:
        raise _fail(f"URL: no origin {url!r} is known", code=1)
    for report in reports:
        table = Table("field", "value", title=f"{url} ({report['visit_type']})")
        for key, value in report.items():
            table.add_row(key, "" if value is None else str(value))
        console.print(table)


@mirror_app.command("rebuild")
def mirror_rebuild(visit_type: Annotated[str | None, typer.Argument()] = None) -> None:
    """Rebuild the Redis mirror from PostgreSQL."""
    from app.mirror_sync import rebuild

    settings = get_settings()
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        for vt in _visit_types(settings, visit_type):
            console.print(f"{vt}: {rebuild(conn, ctx, vt, _now())} origins mirrored")


@mirror_app.command("check")
def mirror_check(visit_type: Annotated[str | None, typer.Argument()] = None) -> None:
    """Report every difference between the Redis mirror and PostgreSQL (exit 1 if any)."""
    from app.mirror_sync import check

    settings = get_settings()
    ctx = Context.from_settings(settings)
    found = 0
    with connect(settings) as conn:
        for vt in _visit_types(settings, visit_type):
            differences = check(conn, ctx, vt, _now())
            found += len(differences)
            for d in differences[:50]:
                console.print(f"{vt}: {d}")
            console.print(f"{vt}: {len(differences)} difference(s)")
    if found:
        raise typer.Exit(1)


def _run_until_signal(target: object) -> None:
    stop = threading.Event()

    def handle(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    target.run(stop)  # type: ignore[attr-defined]


def _setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("REVISIT_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


@app.command("scheduler")
def scheduler() -> None:
    """Run the scheduler: keep every visit queue fed from the Redis pools."""
    from actors.scheduler import SchedulerLoop
    from monitoring.process import serve_scheduler

    _setup_logging()
    settings = get_settings()
    serve_scheduler(settings)
    _run_until_signal(SchedulerLoop(settings))


@app.command("journal")
def journal() -> None:
    """Run the journal client: apply origin_visit_status messages to the visit stats."""
    from actors.journal import JournalClient
    from monitoring.process import serve_journal

    _setup_logging()
    settings = get_settings()
    serve_journal(settings)
    _run_until_signal(JournalClient(settings))


class Lane(StrEnum):
    """Which visit queues a worker pool serves."""

    express = "express"
    slow = "slow"
    priority = "priority"
    recurrent = "recurrent"  # express and slow
    all = "all"


LANES_SERVED = {
    Lane.express: ("express",),
    Lane.slow: ("slow",),
    Lane.priority: ("priority",),
    Lane.recurrent: ("express", "slow"),
    Lane.all: ("express", "slow", "priority"),
}


@app.command("worker")
def worker(
    processes: Annotated[int, typer.Option(min=1)] = 1,
    threads: Annotated[int, typer.Option(min=1)] = 4,
    lane: Annotated[Lane, typer.Option(help="the lanes this worker pool serves")] = Lane.recurrent,
    first_visits_prefix: Annotated[
        list[str] | None,
        typer.Option(help="also serve the first-visits queues of listers with this prefix"),
    ] = None,
) -> None:
    """Run Dramatiq workers for the lanes of the visit types this pool serves
    (REVISIT_WORKER_VISIT_TYPES_ALLOW / _DENY)."""
    from app.queue_names import first_visits_queue, lane_queue

    prefixes = first_visits_prefix or []
    if prefixes:
        # The worker module declares the first-visits queues of these prefixes.
        known = get_settings().first_visits_prefixes
        os.environ["REVISIT_FIRST_VISITS_PREFIXES"] = json.dumps(sorted({*known, *prefixes}))
    queues = []
    for vt in get_settings().served_visit_types():
        queues += [first_visits_queue(prefix, vt) for prefix in prefixes]
        queues += [lane_queue(vt, name) for name in LANES_SERVED[lane]]
    if not queues:
        raise _fail("no visit type to serve: check REVISIT_WORKER_VISIT_TYPES_ALLOW / _DENY")
    from monitoring.dramatiq_metrics import worker_metrics_env

    os.environ.update(worker_metrics_env(get_settings()))
    args = [
        sys.executable,
        "-m",
        "dramatiq",
        "actors.worker",
        "--processes",
        str(processes),
        "--threads",
        str(threads),
        "--queues",
        *queues,
    ]
    os.execv(sys.executable, args)


@app.command("demo")
def demo(
    repos: Annotated[
        int, typer.Option(min=2, max=200, help="git repositories in the demo forge")
    ] = 12,
    duration: Annotated[
        float | None, typer.Option(min=1, help="stop after this many seconds")
    ] = None,
) -> None:
    """Run everything on local throwaway services with a demo forge of git repositories."""
    from app.demo import run_demo

    raise typer.Exit(run_demo(repos, duration, console))


@request_app.command("add")
def request_add(
    url: str,
    visit_type: Annotated[str, typer.Option()] = "git",
    priority: Annotated[int, typer.Option(min=-1000, max=1000)] = 0,
    kind: Annotated[str, typer.Option()] = "operator",
    requested_by: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Ask for a one-shot visit of URL; print the request id."""
    from pydantic import ValidationError

    from app.api_models import RequestVisit, first_error
    from app.requests import RequestError, create_request

    try:
        request = RequestVisit(
            url=url, visit_type=visit_type, priority=priority, kind=kind, requested_by=requested_by
        )
    except ValidationError as exc:
        raise _fail(first_error(exc, "request")) from exc
    with connect(get_settings()) as conn:
        try:
            console.print(str(create_request(conn, request)))
        except RequestError as exc:
            raise _fail(str(exc)) from exc


@request_app.command("list")
def request_list(
    status: Annotated[str | None, typer.Option(help="only requests in this status")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 50,
) -> None:
    """List requests, pending ones first in the order they will be served."""
    from app.requests import list_requests

    statuses = ("pending", "scheduled", "running", "succeeded", "failed", "aborted")
    if status is not None and status not in statuses:
        raise _fail(f"--status: unknown status {status!r} (known: {', '.join(statuses)})")
    with connect(get_settings()) as conn:
        rows = list_requests(conn, status, limit)
    table = Table("id", "url", "type", "priority", "status", "created", "finished", "visit")
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["url"],
            r["visit_type"],
            str(r["priority"]),
            r["status"],
            r["created"].isoformat(timespec="seconds"),
            r["finished_at"].isoformat(timespec="seconds") if r["finished_at"] else "",
            r["visit_status"] or "",
        )
    console.print(table)


def _request_op(op: str, request_id: int, delta: int = 0) -> None:
    from app import requests as req

    settings = get_settings()
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        try:
            if op == "adjust":
                console.print(
                    f"request {request_id}: priority {req.adjust_priority(conn, request_id, delta)}"
                )
            elif op == "cancel":
                req.cancel_request(conn, ctx.redis, settings.redis_namespace, request_id, _now())
                console.print(f"request {request_id}: aborted")
            else:
                console.print(
                    f"request {request_id}: retried as {req.retry_request(conn, request_id)}"
                )
        except req.RequestError as exc:
            raise _fail(str(exc)) from exc


@request_app.command("adjust")
def request_adjust(request_id: int, delta: int) -> None:
    """Add DELTA to a pending request's priority adjustment."""
    _request_op("adjust", request_id, delta)


@request_app.command("cancel")
def request_cancel(request_id: int) -> None:
    """Abort a pending or scheduled request."""
    _request_op("cancel", request_id)


@request_app.command("retry")
def request_retry(request_id: int) -> None:
    """Retry a failed request: a new request supersedes it (the old one is kept)."""
    _request_op("retry", request_id)


@policy_app.command("show")
def policy_show() -> None:
    """The policies and weights of every visit type."""
    from app.db.policies import policies_of
    from app.db.scheduling import visit_type_configs

    table = Table("visit type", "policy", "weight")
    with connect(get_settings()) as conn:
        for vt in visit_type_configs(conn):
            for policy, weight in policies_of(conn, vt).items():
                table.add_row(vt, policy, f"{weight:g}")
    console.print(table)


@policy_app.command("set")
def policy_set(
    visit_type: str,
    weights: Annotated[list[str], typer.Argument(help="POLICY=WEIGHT ...")],
) -> None:
    """Replace the policies of VISIT_TYPE, e.g. never_visited_oldest_update_first=60."""
    from app.db.listings import known_visit_types
    from app.db.policies import set_policies
    from app.domain.policies import UnknownPolicy

    parsed: dict[str, float] = {}
    for item in weights:
        name, sep, value = item.partition("=")
        try:
            parsed[name] = float(value) if sep else float("nan")
        except ValueError:
            parsed[name] = float("nan")
        if parsed[name] != parsed[name]:
            raise _fail(f"WEIGHTS: expected POLICY=WEIGHT with a number, got {item!r}")
    with connect(get_settings()) as conn:
        if visit_type not in known_visit_types(conn):
            raise _fail(f"VISIT_TYPE: unknown visit type {visit_type!r}")
        try:
            set_policies(conn, visit_type, parsed)
        except UnknownPolicy as exc:
            raise _fail(str(exc)) from exc
    console.print(f"{visit_type}: {', '.join(f'{k}={v:g}' for k, v in parsed.items())}")


@app.command("api")
def api(threads: Annotated[int, typer.Option(min=1)] = 2) -> None:
    """Run the actor API (request_visit, adjust_priority, cancel_request, record_listing)."""
    from app.queue_names import API_QUEUE
    from monitoring.dramatiq_metrics import worker_metrics_env

    os.environ.update(worker_metrics_env(get_settings()))
    args = [
        sys.executable,
        "-m",
        "dramatiq",
        "actors.api",
        "--processes",
        "1",
        "--threads",
        str(threads),
        "--queues",
        API_QUEUE,
    ]
    os.execv(sys.executable, args)


@app.command("simulate")
def simulate(
    config: Annotated[Path, typer.Argument(help="world file (.toml or .json)")],
    days: Annotated[float, typer.Option(min=0.1, help="simulated days")] = 30.0,
    out: Annotated[Path, typer.Option(help="folder for report.json and metrics.png")] = Path(
        "simulation"
    ),
    seed: Annotated[int | None, typer.Option(help="replace the world's seed")] = None,
) -> None:
    """Run the scheduler on a simulated world (throwaway PostgreSQL and Redis) and
    write a report of its scheduling quality beside the optimum."""
    from app.simulator.command import simulate as run
    from app.simulator.config import ConfigError
    from app.simulator.engine import SimulationError

    try:
        run(config, days, out, seed, console)
    except (ConfigError, SimulationError) as exc:
        raise _fail(str(exc)) from exc


register_lister_commands(app, lister_app)


def main() -> None:
    """Entry point of the ``revisit`` console script."""
    app()
