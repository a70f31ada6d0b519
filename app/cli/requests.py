"""``revisit request``: one-shot visit requests (save code now)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from app.cli.common import console, fail, now, warn_unserved
from app.db.connection import connect
from app.inputs.api import MAX_PRIORITY, MIN_PRIORITY, REQUEST_KINDS
from app.services.context import Context
from app.settings import get_settings

STATUSES = ("pending", "scheduled", "running", "succeeded", "failed", "aborted")
request_app = typer.Typer(
    rich_markup_mode=None, help="One-shot visit requests (save code now).", no_args_is_help=True
)


@request_app.command("add")
def request_add(
    url: str,
    visit_type: Annotated[str, typer.Option()] = "git",
    priority: Annotated[int, typer.Option(min=MIN_PRIORITY, max=MAX_PRIORITY)] = 0,
    kind: Annotated[str, typer.Option(help=f"one of {', '.join(REQUEST_KINDS)}")] = "operator",
    requested_by: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Ask for a one-shot visit of URL; print the request id."""
    from pydantic import ValidationError

    from app.inputs.api import RequestVisit, first_error
    from app.services.requests import RequestError, create_request

    try:
        request = RequestVisit.model_validate(
            {
                "url": url,
                "visit_type": visit_type,
                "priority": priority,
                "kind": kind,
                "requested_by": requested_by,
            }
        )
    except ValidationError as exc:
        raise fail(first_error(exc, "request")) from exc
    with connect(get_settings()) as conn:
        try:
            console.print(str(create_request(conn, request)))
        except RequestError as exc:
            raise fail(str(exc)) from exc
    warn_unserved([visit_type])


@request_app.command("list")
def request_list(
    status: Annotated[
        str | None, typer.Option(help=f"only requests in this status: {', '.join(STATUSES)}")
    ] = None,
    limit: Annotated[int, typer.Option(min=1)] = 50,
) -> None:
    """List requests, pending ones first in the order they will be served."""
    from app.db.requests import list_requests

    if status is not None and status not in STATUSES:
        raise fail(f"--status: unknown status {status!r} (known: {', '.join(STATUSES)})")
    with connect(get_settings()) as conn:
        rows = list_requests(conn, status, limit)
    table = Table(
        "id", "url", "type", "priority", "status", "created", "finished", "visit", "reason"
    )
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["url"],
            r["visit_type"],
            str(r["priority"]),
            r["status"],
            r["created"].isoformat(timespec="seconds"),
            r["finished_at"].isoformat(timespec="seconds") if r["finished_at"] else "",
            r["visit_status"] or "",
            r["failure_reason"] or "",
        )
    console.print(table)


def _request_op(op: str, request_id: int, delta: int = 0) -> None:
    from app.services import requests as req

    settings = get_settings()
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        try:
            if op == "adjust":
                console.print(
                    f"request {request_id}: priority {req.adjust_priority(conn, request_id, delta)}"
                )
            elif op == "cancel":
                req.cancel_request(conn, ctx.redis, settings.redis_namespace, request_id, now())
                console.print(f"request {request_id}: aborted")
            else:
                console.print(
                    f"request {request_id}: retried as {req.retry_request(conn, request_id)}"
                )
        except req.RequestError as exc:
            raise fail(str(exc)) from exc


RequestId = Annotated[int, typer.Argument(min=1, max=2**63 - 1, help="the request's id")]


# A negative DELTA (-5) is an argument, not an unknown option.
@request_app.command("adjust", context_settings={"ignore_unknown_options": True})
def request_adjust(
    request_id: RequestId,
    delta: Annotated[
        int,
        typer.Argument(
            min=MIN_PRIORITY - MAX_PRIORITY,
            max=MAX_PRIORITY - MIN_PRIORITY,
            help=f"added to the priority, which stays within {MIN_PRIORITY}..{MAX_PRIORITY}",
        ),
    ],
) -> None:
    """Add DELTA to a pending request's priority adjustment."""
    _request_op("adjust", request_id, delta)


@request_app.command("cancel")
def request_cancel(request_id: RequestId) -> None:
    """Abort a pending or scheduled request."""
    _request_op("cancel", request_id)


@request_app.command("retry")
def request_retry(request_id: RequestId) -> None:
    """Retry a failed request: a new request supersedes it (the old one is kept)."""
    _request_op("retry", request_id)
