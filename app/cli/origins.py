"""``revisit origins`` and ``revisit origin``: listed origins."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, TextIO

import typer
from pydantic import ValidationError
from rich.table import Table

from app.cli.common import (
    OnlyVisitType,
    connected,
    console,
    fail,
    now,
    progress,
    refusing,
    require_visit_type,
    say,
    split_lister,
    warn_unserved,
)
from app.db.connection import DictConnection, connect
from app.db.listings import UnknownLister, find_lister
from app.inputs.api import MAX_PRIORITY, MIN_PRIORITY
from app.inputs.listing import batches
from app.services.context import Context
from app.services.introspection import describe_origin
from app.services.listing import (
    IMPORT_WRITERS,
    MAX_DISABLE_SHARE,
    ImportReport,
    MassDisable,
    finish_listing,
    import_listing,
    start_listing,
)
from app.services.origins import send_visits, set_disabled
from app.services.requests import RequestError
from app.settings import get_settings

origins_app = typer.Typer(rich_markup_mode=None, help="Listed origins.", no_args_is_help=True)
origin_app = typer.Typer(rich_markup_mode=None, help="One origin.", no_args_is_help=True)


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
    allow_mass_disable: Annotated[
        bool,
        typer.Option(
            "--allow-mass-disable",
            help="with --full, disable unseen origins even beyond half of the lister's",
        ),
    ] = False,
) -> None:
    """Record listed origins in batches; a bad line refuses its whole batch.

    With --full, the lister's origins missing from the file are disabled,
    unless some batch was refused (the listing is then incomplete).
    """
    name, instance = split_lister(lister)
    settings = get_settings()
    ctx = Context.from_settings(settings)
    handle = _open(file)
    with connect(settings) as conn, handle:
        with refusing(UnknownLister, prefix="--lister: "):
            lister_id = find_lister(conn, name, instance)["id"]
        started = start_listing(conn, lister_id, now())
        size = None if file == "-" else os.fstat(handle.fileno()).st_size
        with progress(f"importing {file}", size) as advance:
            lines = _counted(handle, advance)
            report = _import(conn, ctx, lister_id, lines, batch_size, csv_format)
        for refused_batch in report.refused:
            for error in refused_batch.errors:
                say(f"{file}: {error}", stderr=True)
        recorded, refused = report.recorded, len(report.refused)
        console.print(f"imported {recorded} origins for {lister}")
        share = 1.0 if allow_mass_disable else MAX_DISABLE_SHARE
        if not refused:
            try:
                disabled = finish_listing(
                    conn, ctx, lister_id, started, now(), full=full, max_disable_share=share
                )
            except MassDisable as exc:
                raise fail(f"--{exc} (pass --allow-mass-disable if it is right)") from exc
            if full:
                console.print(f"disabled {disabled} origins the listing did not report")
    if refused:
        raise fail(
            f"{refused} batch(es) refused, nothing of them written"
            + ("; unseen origins were not disabled" if full else "")
        )


def _import(
    conn: DictConnection,
    ctx: Context,
    lister_id: uuid.UUID,
    lines: Iterable[str],
    batch_size: int,
    csv_format: bool,
) -> ImportReport:
    """Import ``lines`` on IMPORT_WRITERS connections (``conn`` and new ones)."""
    with contextlib.ExitStack() as stack:
        extra = [stack.enter_context(connect(ctx.settings)) for _ in range(IMPORT_WRITERS - 1)]
        parsed = batches(lines, batch_size, csv_format=csv_format)
        return import_listing(conn, ctx, lister_id, parsed, now, extra)


def _counted(lines: Iterable[str], advance: Callable[[float], None]) -> Iterator[str]:
    """The lines, advancing the progress bar by their size (about their bytes)."""
    for line in lines:
        advance(len(line))
        yield line


def _open(file: str) -> TextIO:
    # Undecodable bytes become surrogates, refused line by line by the parser.
    if file == "-":
        sys.stdin.reconfigure(encoding="utf-8", errors="surrogateescape")  # type: ignore[union-attr]
        return sys.stdin
    try:
        return Path(file).open(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise fail(f"FILE: cannot read {file}: {exc.strerror}") from exc


@origin_app.command("show")
def origin_show(url: str, visit_type: OnlyVisitType = None) -> None:
    """Where an origin stands: listing, visit stats, place and rank in the mirror."""
    with connected() as (conn, ctx):
        require_visit_type(conn, visit_type, "--visit-type")
        reports = describe_origin(conn, ctx, url, visit_type)
    if not reports:
        raise fail(f"URL: no origin {url!r} is known", code=1)
    for report in reports:
        table = Table("field", "value", title=f"{url} ({report['visit_type']})")
        for key, value in report.items():
            table.add_row(key, "" if value is None else str(value))
        console.print(table)


def _set_disabled(url: str, visit_type: str | None, *, disabled: bool) -> None:
    with connected() as (conn, ctx):
        require_visit_type(conn, visit_type, "--visit-type")
        changed = set_disabled(conn, ctx, url, visit_type, now(), disabled=disabled)
    if not changed:
        raise fail(f"URL: no origin {url!r} is known", code=1)
    state = "disabled: no visits until enabled" if disabled else "enabled"
    console.print(f"{url} ({', '.join(changed)}): {state}")


@origin_app.command("disable")
def origin_disable(url: str, visit_type: OnlyVisitType = None) -> None:
    """Stop visiting an origin (listings do not undo it; in-flight visits finish)."""
    _set_disabled(url, visit_type, disabled=True)


@origin_app.command("enable")
def origin_enable(url: str, visit_type: OnlyVisitType = None) -> None:
    """Visit a disabled origin again (if some lister still reports it)."""
    _set_disabled(url, visit_type, disabled=False)


@origins_app.command("send")
def origins_send(
    urls: Annotated[list[str], typer.Argument(help="origin URLs")],
    visit_type: Annotated[
        str | None, typer.Option(help="visit type (default: every one the origin has)")
    ] = None,
    priority: Annotated[int, typer.Option(min=MIN_PRIORITY, max=MAX_PRIORITY)] = 0,
) -> None:
    """Visit these origins now: one-shot requests, served before recurrent visits."""
    with connect(get_settings()) as conn:
        require_visit_type(conn, visit_type, "--visit-type")
        with refusing(ValidationError, RequestError, whole="URL"):
            sent = send_visits(conn, urls, visit_type, priority)
    table = Table("request", "url", "visit type")
    for url, vt, request_id in sent:
        table.add_row(str(request_id), url, vt)
    console.print(table)
    warn_unserved(vt for _, vt, _ in sent)
