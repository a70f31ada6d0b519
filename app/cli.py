"""The ``revisit`` command line."""

from __future__ import annotations

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

console = Console()
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
    batch_size: Annotated[int, typer.Option(min=1, help="lines per transaction")] = 100_000,
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
        report = import_listing(conn, ctx, lister_id, parsed, _now)
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
    """Show (--dry-run) or schedule the next N visits of VISIT_TYPE."""
    from app.introspection import peek_next
    from app.mirror_sync import ensure_built

    settings = get_settings()
    _visit_types(settings, visit_type)
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        ensure_built(conn, ctx, visit_type, _now())
        if not dry_run:
            from actors.scheduler import SchedulerLoop

            loop = SchedulerLoop(settings)
            results = loop.step(_now())
            total = sum(len(r.orders) for r in results if r.visit_type == visit_type)
            console.print(f"scheduled {total} visits of {visit_type}")
            return
        table = Table("rank", "url", "pool", "score")
        for rank, (url, pool, score) in enumerate(peek_next(conn, ctx, visit_type, n)):
            table.add_row(str(rank), url, pool, f"{score:.0f}")
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
    from monitoring.metrics import serve

    _setup_logging()
    settings = get_settings()
    serve(settings.scheduler_metrics_port, settings.metrics_address)
    _run_until_signal(SchedulerLoop(settings))


@app.command("journal")
def journal() -> None:
    """Run the journal client: apply origin_visit_status messages to the visit stats."""
    from actors.journal import JournalClient
    from monitoring.metrics import serve

    _setup_logging()
    settings = get_settings()
    serve(settings.journal_metrics_port, settings.metrics_address)
    _run_until_signal(JournalClient(settings))


class Lane(StrEnum):
    """Which visit queues a worker pool serves."""

    recurrent = "recurrent"
    priority = "priority"
    all = "all"


@app.command("worker")
def worker(
    processes: Annotated[int, typer.Option(min=1)] = 1,
    threads: Annotated[int, typer.Option(min=1)] = 4,
    lane: Annotated[Lane, typer.Option(help="recurrent visits, one-shot requests, or both")] = (
        Lane.recurrent
    ),
) -> None:
    """Run Dramatiq workers for the visit queues of the configured visit types."""
    from app.queue_names import priority_queue, visit_queue

    queues = []
    for vt in get_settings().visit_types:
        if lane in (Lane.recurrent, Lane.all):
            queues.append(visit_queue(vt))
        if lane in (Lane.priority, Lane.all):
            queues.append(priority_queue(vt))
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


def main() -> None:
    """Entry point of the ``revisit`` console script."""
    app()
