"""The ``revisit`` command line, one module per command group."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from typing import Annotated

import typer

from app.cli import processes
from app.cli.common import console, say
from app.cli.db import db_app
from app.cli.dead_letters import dead_letters_app
from app.cli.errors import unreachable
from app.cli.forges import forge_app
from app.cli.listers import lister_app, rpc
from app.cli.mirror import mirror_app
from app.cli.origins import origin_app, origins_app
from app.cli.policies import policy_app, schedule
from app.cli.requests import request_app
from app.cli.status import status
from app.cli.visit_types import visit_type_app
from app.settings import CONFIG_VARIABLE, get_settings

app = typer.Typer(
    rich_markup_mode=None,
    help="revisit: decides which software origin each loader visits next.",
    no_args_is_help=True,
)


def _version(value: bool) -> None:
    if value:
        console.print(f"revisit {version('revisit')}")
        raise typer.Exit()


def _config(path: str | None) -> None:
    if path is not None:
        os.environ[CONFIG_VARIABLE] = path
        get_settings.cache_clear()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
    config: Annotated[
        str | None,
        typer.Option(
            callback=_config,
            is_eager=True,
            help=f"TOML settings file (as {CONFIG_VARIABLE}; REVISIT_* variables override it)",
        ),
    ] = None,
) -> None:
    """revisit: decides which software origin each loader visits next."""


app.add_typer(db_app, name="db")
app.add_typer(lister_app, name="lister")
app.add_typer(origins_app, name="origins")
app.add_typer(origin_app, name="origin")
app.add_typer(mirror_app, name="mirror")
app.add_typer(request_app, name="request")
app.add_typer(forge_app, name="forge")
app.add_typer(policy_app, name="policy")
app.add_typer(visit_type_app, name="visit-type")
app.add_typer(dead_letters_app, name="dead-letters")
app.command("schedule")(schedule)
app.command("status")(status)
processes.register(app)
app.command("rpc")(rpc)


def main() -> None:
    """Entry point of the ``revisit`` console script.

    An unreachable service ends the command with one line naming the setting
    to fix (exit 3), not a traceback.
    """
    try:
        app()
    except Exception as exc:
        message = unreachable(exc)
        if message is None:
            raise
        say(f"error: {message}", stderr=True)
        sys.exit(3)
