"""``revisit visit-type``: add, list and change visit types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from app.cli.common import DURATION_HELP, console, format_duration, parse_duration, refusing
from app.db.connection import DictConnection, connect
from app.db.visit_types import list_visit_types
from app.loaders.base import installed_loaders
from app.services.visit_types import (
    VisitTypeChange,
    VisitTypeError,
    add_visit_type,
    set_visit_type,
)
from app.settings import get_settings

visit_type_app = typer.Typer(
    rich_markup_mode=None,
    help="Visit types: loaders, queues and visit intervals.",
    no_args_is_help=True,
)


def _apply(
    write: Callable[[DictConnection, VisitTypeChange], None], arguments: dict[str, Any]
) -> None:
    """Validate a command's arguments (its name and options; an option not given
    is None) as a VisitTypeChange, then ``write`` it."""
    fields = {key: value for key, value in arguments.items() if key != "name"}
    for key in ("min_interval", "max_interval", "time_limit", "retry_delay"):
        text, option = fields.pop(key), "--" + key.replace("_", "-")
        fields[f"{key}_s"] = None if text is None else parse_duration(text, option)
    with refusing(ValidationError, whole="visit type"):
        change = VisitTypeChange(name=arguments["name"], **fields)
    with connect(get_settings()) as conn, refusing(VisitTypeError):
        write(conn, change)


Description = Annotated[str | None, typer.Option(help="what these visits do")]
MinInterval = Annotated[str | None, typer.Option(help=f"shortest interval, {DURATION_HELP}")]
MaxInterval = Annotated[str | None, typer.Option(help=f"longest interval, {DURATION_HELP}")]
QueueLength = Annotated[
    int | None, typer.Option(help="messages each lane's queue may hold (1..1000000)")
]
TimeLimit = Annotated[
    str | None, typer.Option(help=f"longest a visit may run, {DURATION_HELP} (default 4h)")
]
Retries = Annotated[
    int | None,
    typer.Option("--retries", help="retries after a transient failure, 0..20 (default 3)"),
]
RetryDelay = Annotated[
    str | None, typer.Option(help=f"first retry's delay, doubling, {DURATION_HELP} (default 30s)")
]
LoaderName = Annotated[
    str | None,
    typer.Option(
        help="the loader that visits its origins (revisit.loaders entry point, e.g. swh-git "
        "for the archive's swh-loader-git; default: the one named like the visit type)"
    ),
]
Enabled = Annotated[
    bool | None,
    typer.Option(
        "--enable/--disable",
        help="whether the scheduler sends its visits (a visit type a listing created is "
        "paused until enabled)",
        show_default=False,
    ),
]


@visit_type_app.command("add")
def visit_type_add(
    name: Annotated[
        str,
        typer.Argument(help="lower case letters, digits, '-', '_' and '.' (e.g. svn-export)"),
    ],
    description: Description = None,
    min_interval: MinInterval = None,
    max_interval: MaxInterval = None,
    max_queue_length: QueueLength = None,
    time_limit: TimeLimit = None,
    num_retries: Retries = None,
    retry_delay: RetryDelay = None,
    loader: LoaderName = None,
) -> None:
    """Add a visit type (with the project's default policy, age_optimal)."""
    _apply(add_visit_type, locals())  # the command's arguments, before any other name
    console.print(f"added visit type {name}")
    console.print(
        f"note: the scheduler feeds {name} within 30 s; running workers serve it once restarted"
    )
    if (loader or name) not in installed_loaders():
        console.print(f"note: no loader {loader or name} is installed: its visits would fail")


@visit_type_app.command("set")
def visit_type_set(
    name: str,
    description: Description = None,
    min_interval: MinInterval = None,
    max_interval: MaxInterval = None,
    max_queue_length: QueueLength = None,
    time_limit: TimeLimit = None,
    num_retries: Retries = None,
    retry_delay: RetryDelay = None,
    loader: LoaderName = None,
    enabled: Enabled = None,
) -> None:
    """Change settings of a visit type (those given; the scheduler reads them within 30 s)."""
    _apply(set_visit_type, locals())  # the command's arguments, before any other name
    console.print(f"updated visit type {name}")
    if loader is not None:
        console.print("note: running workers use the new loader once restarted")
        if loader not in installed_loaders():
            console.print(f"note: no loader {loader} is installed: its visits would fail")


@visit_type_app.command("list")
def visit_type_list() -> None:
    """Every visit type: settings, origins, whether the scheduler sends its visits
    (one a listing created is paused), whether this environment's workers serve
    it (REVISIT_WORKER_VISIT_TYPES_ALLOW / _DENY) and it has a loader."""
    from app.cli.common import new_table

    settings = get_settings()
    loaders = installed_loaders()
    table = new_table(
        "name, min interval, max interval, queue length, origins, scheduled, served, loader, "
        "time limit, retries, retry delay, description"
    )
    with connect(settings) as conn:
        for r in list_visit_types(conn):
            table.add_row(
                r["name"],
                format_duration(float(r["min_interval_s"])),
                format_duration(float(r["max_interval_s"])),
                str(r["max_queue_length"]),
                str(r["origins"]),
                "yes" if r["enabled"] else "no (paused: set --enable)",
                "yes" if settings.served_visit_types([r["name"]]) else "no",
                r["loader"] if r["loader"] in loaders else f"{r['loader']} (not installed)",
                format_duration(float(r["time_limit_s"])),
                str(r["num_retries"]),
                format_duration(float(r["retry_delay_s"])),
                r["description"],
            )
    console.print(table)
