"""The ``revisit`` command line, one module per command group."""

from __future__ import annotations

import typer

from app.cli import processes
from app.cli.db import db_app
from app.cli.mirror import mirror_app
from app.cli.origins import lister_app, origin_app, origins_app
from app.cli.policies import policy_app, schedule
from app.cli.requests import request_app

app = typer.Typer(
    help="revisit: decides which software origin each loader visits next.", no_args_is_help=True
)
app.add_typer(db_app, name="db")
app.add_typer(lister_app, name="lister")
app.add_typer(origins_app, name="origins")
app.add_typer(origin_app, name="origin")
app.add_typer(mirror_app, name="mirror")
app.add_typer(request_app, name="request")
app.add_typer(policy_app, name="policy")
app.command("schedule")(schedule)
processes.register(app)


def main() -> None:
    """Entry point of the ``revisit`` console script."""
    app()
