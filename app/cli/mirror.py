"""``revisit mirror``: the Redis mirror of the scheduling pools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from app.cli.common import connected, console, err, now, refusing, say, visit_types_of
from app.services.context import Context
from app.services.mirror_sync import check_settled, rebuild, repair
from queues.mirror import RebuildInProgress, RebuildLost

mirror_app = typer.Typer(
    rich_markup_mode=None, help="The Redis mirror of the scheduling pools.", no_args_is_help=True
)


@mirror_app.command("rebuild")
def mirror_rebuild(visit_type: Annotated[str | None, typer.Argument()] = None) -> None:
    """Rebuild the Redis mirror from PostgreSQL."""
    with connected() as (conn, ctx):
        for vt in visit_types_of(conn, visit_type):
            with (
                err.status(f"rebuilding the mirror of {vt} from PostgreSQL..."),
                refusing(RebuildInProgress, RebuildLost, prefix=f"{vt}: ", code=1),
            ):
                mirrored = rebuild(conn, ctx, vt, now())
            console.print(f"{vt}: {mirrored} origins mirrored")


@mirror_app.command("check")
def mirror_check(visit_type: Annotated[str | None, typer.Argument()] = None) -> None:
    """Report every difference between the Redis mirror and PostgreSQL, by URL (exit 1 if any).

    Differences are confirmed by a second look a second later, so origins that
    a running system was moving during the first are not reported.
    """
    _mirror_command(check_settled, visit_type, "difference(s)", repairing=False)


@mirror_app.command("repair")
def mirror_repair(visit_type: Annotated[str | None, typer.Argument()] = None) -> None:
    """Move every origin that persistently differs to where PostgreSQL says (exit 0)."""

    def check_and_repair(conn: Any, ctx: Context, vt: str, clock: Any) -> list[Any]:
        differences = check_settled(conn, ctx, vt, clock)
        repair(conn, ctx, vt, differences, clock())
        return differences

    _mirror_command(check_and_repair, visit_type, "origin(s) repaired", repairing=True)


def _mirror_command(
    action: Callable[..., list[Any]], visit_type: str | None, what: str, repairing: bool
) -> None:
    """Run ``action`` on each visit type's mirror, after its corrupt keys (one
    line each) are removed when ``repairing``, or counted as differences (the
    comparison cannot read them) when checking."""
    found = 0
    with connected() as (conn, ctx):
        for vt in visit_types_of(conn, visit_type):
            corrupt = ctx.mirror.corruptions(vt)
            for corruption in corrupt[:50]:
                say(f"{vt}: {corruption}")
            if corrupt and not repairing:
                found += len(corrupt)
                console.print(f"{vt}: {len(corrupt)} corrupt key(s) or member(s)")
                continue
            ctx.mirror.remove_corruptions(vt, corrupt)
            differences = action(conn, ctx, vt, now)
            found += len(differences)
            for d in differences[:50]:
                say(f"{vt}: {d}")
            console.print(f"{vt}: {len(differences)} {what}")
    if found and not repairing:
        raise typer.Exit(1)
