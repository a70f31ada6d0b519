"""What every command group shares: consoles, errors that name the field, the clock."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from app.db.connection import DictConnection, connect
from app.db.listings import known_visit_types
from app.domain.queue_names import priority_queue
from app.inputs.api import first_error
from app.services.context import Context, redis_client
from app.settings import get_settings
from queues.errors import UNAVAILABLE
from queues.workers import capacities

# Piped output (scripts, tests) gets wide tables rather than truncated cells.
console = Console() if sys.stdout.isatty() else Console(width=240)
err = Console(stderr=True, soft_wrap=True)


def now() -> datetime:
    """The wall clock, in UTC (commands are the one place that reads it)."""
    return datetime.now(tz=UTC)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr; return the Exit to raise (2: bad input)."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    return typer.Exit(code)


def say(text: str, *, stderr: bool = False) -> None:
    """Print ``text`` as it is (no markup, no highlighting): URLs, messages and
    log lines may hold brackets."""
    (err if stderr else console).print(text, markup=False, highlight=False)


@contextlib.contextmanager
def refusing(
    *errors: type[Exception], prefix: str = "", whole: str = "input", code: int = 2
) -> Iterator[None]:
    """Turn one of ``errors`` raised in the block into ``error: <prefix><its text>``
    and exit ``code``; a pydantic ValidationError says its first bad field (``whole``:
    none)."""
    try:
        yield
    except errors as exc:
        text = first_error(exc, whole) if isinstance(exc, ValidationError) else str(exc)
        raise fail(prefix + text, code) from exc


def new_table(columns: str, **options: Any) -> Table:
    """A table whose column names are given in one string, separated by ", "."""
    return Table(*columns.split(", "), **options)


#: Seconds per duration unit (no unit: seconds).
UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_HELP = "a duration: seconds, or a number with s, m, h or d (12h, 64d)"


def parse_duration(text: str, option: str, positive: bool = False) -> float:
    """Seconds of ``90``, ``30s``, ``15m``, ``6h`` or ``1d``; bad text (zero too if
    ``positive``) is refused naming ``option``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None or (positive and float(match[1]) == 0):
        kind = "a positive duration" if positive else "a duration"
        raise fail(f"{option}: expected {DURATION_HELP.replace('a duration', kind)}, got {text!r}")
    return float(match[1]) * UNIT_S[match[2]]


def format_duration(seconds: float) -> str:
    """``seconds`` in the largest unit that divides it (``12h``, ``90s``)."""
    for unit in ("d", "h", "m"):
        if seconds >= UNIT_S[unit] and seconds % UNIT_S[unit] == 0:
            return f"{seconds / UNIT_S[unit]:g}{unit}"
    return f"{seconds:g}s"


#: ``--visit-type`` of the commands on one origin (checked by ``require_visit_type``).
OnlyVisitType = Annotated[str | None, typer.Option(help="only this visit type")]


@contextlib.contextmanager
def connected() -> Iterator[tuple[DictConnection, Context]]:
    """A PostgreSQL connection and the services' context, from the settings."""
    settings = get_settings()
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        yield conn, ctx


def visit_types_of(conn: DictConnection, visit_type: str | None) -> list[str]:
    """The visit types of the table, or just ``visit_type`` if it is one of them."""
    if visit_type is None:
        return sorted(known_visit_types(conn))
    require_visit_type(conn, visit_type, "VISIT_TYPE")
    return [visit_type]


def require_visit_type(conn: DictConnection, visit_type: str | None, field: str) -> None:
    """Refuse, naming ``field``, a visit type the database does not know (None: any)."""
    if visit_type is None:
        return
    known = known_visit_types(conn)
    if visit_type not in known:
        names = ", ".join(sorted(known))
        raise fail(f"{field}: unknown visit type {visit_type!r} (known: {names})")


def split_lister(lister: str) -> tuple[str, str]:
    """NAME/INSTANCE, or a refusal naming --lister."""
    name, sep, instance = lister.partition("/")
    if not sep or not name or not instance:
        raise fail(f"--lister: expected NAME/INSTANCE, got {lister!r}")
    return name, instance


@contextlib.contextmanager
def progress(description: str, total: float | None) -> Iterator[Callable[[float], None]]:
    """A progress bar with the time left on stderr (a terminal only: piped output
    stays clean); yields the function that advances it."""
    if not err.is_terminal:
        yield lambda _: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda amount: bar.advance(task, amount)


def warn_unserved(visit_types: Iterable[str]) -> None:
    """Warn on stderr when no worker serves the priority lane of a visit type a
    request was just made for: it would wait, without a word, until one starts."""
    settings = get_settings()
    queues = sorted({priority_queue(vt) for vt in visit_types})
    try:
        capacity = capacities(redis_client(settings), settings.redis_namespace, queues)
        for queue in queues:
            if not capacity[queue].threads:
                say(
                    f"warning: no worker serves {queue} now: the request waits "
                    "until a priority worker serving it starts (REVISIT_WORKER_VISIT_TYPES_ALLOW "
                    "/ _DENY of the workers)",
                    stderr=True,
                )
    except UNAVAILABLE:
        pass  # the request is recorded; the broker's state is the workers' concern
