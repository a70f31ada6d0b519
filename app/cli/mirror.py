"""``revisit mirror``: the Redis mirror of the scheduling pools."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import console, err, now, visit_types_of
from app.context import Context
from app.db.connection import connect
from app.settings import get_settings

mirror_app = typer.Typer(
    rich_markup_mode=None, help="The Redis mirror of the scheduling pools.", no_args_is_help=True
)


@mirror_app.command("rebuild")
def mirror_rebuild(visit_type: Annotated[str | None, typer.Argument()] = None) -> None:
    """Rebuild the Redis mirror from PostgreSQL."""
    from app.mirror_sync import rebuild

    settings = get_settings()
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        for vt in visit_types_of(settings, visit_type):
            with err.status(f"rebuilding the mirror of {vt} from PostgreSQL..."):
                mirrored = rebuild(conn, ctx, vt, now())
            console.print(f"{vt}: {mirrored} origins mirrored")


@mirror_app.command("check")
def mirror_check(visit_type: Annotated[str | None, typer.Argument()] = None) -> None:
    """Report every difference between the Redis mirror and PostgreSQL (exit 1 if any)."""
    from app.mirror_sync import check

    settings = get_settings()
    ctx = Context.from_settings(settings)
    found = 0
    with connect(settings) as conn:
        for vt in visit_types_of(settings, visit_type):
            differences = check(conn, ctx, vt, now())
            found += len(differences)
            for d in differences[:50]:
                console.print(f"{vt}: {d}")
            console.print(f"{vt}: {len(differences)} difference(s)")
    if found:
        raise typer.Exit(1)
