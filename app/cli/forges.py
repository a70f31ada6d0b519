"""``revisit forge``: add forge now (a workflow of requests)."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from app.cli.common import console, now, refusing
from app.cli.listers import parse_arguments
from app.db.connection import connect
from app.inputs.api import MAX_PRIORITY, MIN_PRIORITY, AddForge
from app.services.requests import RequestError
from app.settings import get_settings

forge_app = typer.Typer(
    rich_markup_mode=None,
    help="Add forge now: list a forge and visit it first.",
    no_args_is_help=True,
)


@forge_app.command("add")
def forge_add(
    lister: Annotated[str, typer.Argument(help="installed lister (entry point revisit.listers)")],
    instance: str,
    url: Annotated[str, typer.Argument(help="the forge's URL")],
    arg: Annotated[list[str] | None, typer.Option(help="KEY=VALUE argument of the lister")] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            min=MIN_PRIORITY, max=MAX_PRIORITY, help="base priority (default: the template's, 50)"
        ),
    ] = None,
    requested_by: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Schedule LISTER for INSTANCE (its full listing now, then as scheduled), and
    visit every origin that listing reports before the recurrent backlog: print
    the workflow's request id (``revisit request show ID`` shows its progress)."""
    from app.listers.forges import add_forge

    with refusing(ValidationError, whole="forge"):
        forge = AddForge.model_validate(
            {
                "lister": lister,
                "instance": instance,
                "url": url,
                "arguments": parse_arguments(arg or []),
                "priority": priority,
                "requested_by": requested_by,
            }
        )
    with connect(get_settings()) as conn, refusing(RequestError):
        console.print(str(add_forge(conn, forge, now())))
