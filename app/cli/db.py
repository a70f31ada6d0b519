"""``revisit db``: the database schema."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import console
from app.db.migrate import migrate
from app.settings import get_settings

db_app = typer.Typer(rich_markup_mode=None, help="Database schema.", no_args_is_help=True)


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
