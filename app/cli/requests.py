"""``revisit request``: one-shot visit requests (save code now)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from pydantic import ValidationError

from app.cli.common import console, fail, new_table, now, refusing, say, warn_unserved
from app.db.connection import connect
from app.db.requests import children, dependencies, list_requests
from app.inputs.api import MAX_PRIORITY, MIN_PRIORITY, REQUEST_KINDS, RequestVisit
from app.services.context import redis_client
from app.services.requests import (
    RequestError,
    adjust_priority,
    cancel_request,
    create_request,
    get_request,
    retry_request,
)
from app.settings import get_settings

#: Children of a request shown per status by ``request show``.
SHOWN_CHILDREN = 10
Status = Literal["blocked", "pending", "scheduled", "running", "succeeded", "failed", "aborted"]
request_app = typer.Typer(
    rich_markup_mode=None, help="One-shot visit requests (save code now).", no_args_is_help=True
)


@request_app.command("add")
def request_add(
    url: str,
    visit_type: Annotated[str, typer.Option()] = "git",
    priority: Annotated[
        int | None,
        typer.Option(
            min=MIN_PRIORITY, max=MAX_PRIORITY, help="base priority (default: the parent's, or 0)"
        ),
    ] = None,
    kind: Annotated[str, typer.Option(help=f"one of {', '.join(REQUEST_KINDS)}")] = "operator",
    requested_by: Annotated[str | None, typer.Option()] = None,
    after: Annotated[
        str | None,
        typer.Option(help="ID[,ID...]: wait, blocked, until these requests completed"),
    ] = None,
    allow_fail: Annotated[
        str | None,
        typer.Option(help="ID[,ID...] of --after whose failure does not abort this request"),
    ] = None,
    parent: Annotated[int | None, typer.Option(min=1, help="the request this one is for")] = None,
) -> None:
    """Ask for a one-shot visit of URL; print the request id."""
    with refusing(ValidationError, whole="request"):
        request = RequestVisit.model_validate(
            {
                "url": url,
                "visit_type": visit_type,
                "priority": priority,
                "kind": kind,
                "requested_by": requested_by,
                "depends_on": _ids(after, "--after"),
                "allowed_to_fail": _ids(allow_fail, "--allow-fail"),
                "parent": parent,
            }
        )
    with connect(get_settings()) as conn, refusing(RequestError):
        console.print(str(create_request(conn, request)))
    warn_unserved([visit_type])


def _ids(text: str | None, option: str) -> list[str]:
    """The comma-separated ids of an option (checked as request ids by the model)."""
    if text is None:
        return []
    ids = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in ids):
        raise fail(f"{option}: expected request ids separated by commas, got {text!r}")
    return ids


@request_app.command("list")
def request_list(
    status: Annotated[Status | None, typer.Option(help="only requests in this status")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 50,
) -> None:
    """List requests, pending ones first in the order they will be served."""
    with connect(get_settings()) as conn:
        rows = list_requests(conn, status, limit)
    table = new_table(
        "id, url, type, priority, status, after, visited, created, finished, visit, reason"
    )
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["url"],
            r["visit_type"] or "listing",
            str(r["priority"]),
            r["status"],
            ",".join(str(i) for i in r["prerequisites"]),
            f"{r['visited']}/{r['children']}" if r["children"] else "",
            r["created"].isoformat(timespec="seconds"),
            r["finished_at"].isoformat(timespec="seconds") if r["finished_at"] else "",
            r["visit_status"] or "",
            r["failure_reason"] or "",
        )
    console.print(table)


@request_app.command("show")
def request_show(
    request_id: Annotated[int, typer.Argument(min=1, max=2**63 - 1, help="the request's id")],
) -> None:
    """Every field of a request, its prerequisites, its dependents, and the
    requests made for it (a workflow's) with its progress."""
    with connect(get_settings()) as conn:
        with refusing(RequestError):
            row = get_request(conn, request_id)
        before = dependencies(conn, request_id)
        after = dependencies(conn, request_id, dependents=True)
        made = children(conn, request_id, SHOWN_CHILDREN)
    for key, value in row.items():
        if value is not None:
            say(f"{key}: {value}")
    for title, edges in (("prerequisites", before), ("dependents", after)):
        console.print(f"{title}:" + ("" if edges else " none"), markup=False)
        for e in edges:
            may_fail = " (allowed to fail)" if e["allowed_to_fail"] else ""
            console.print(f"  {e['id']} {e['status']} {e['url']}{may_fail}", markup=False)
    if made:
        counts = {m["status"]: int(m["n"]) for m in made}
        visited = counts.get("succeeded", 0) + counts.get("failed", 0)
        each = ", ".join(f"{n} {status}" for status, n in counts.items())
        console.print(f"children: {visited}/{sum(counts.values())} visited ({each})", markup=False)
        for m in made:
            for line in m["first"]:
                say(f"  {line}")
            if m["n"] > len(m["first"]):
                console.print(f"  ... {m['n'] - len(m['first'])} more {m['status']}", markup=False)


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
    """Add DELTA to a blocked or pending request's priority adjustment."""
    with connect(get_settings()) as conn, refusing(RequestError):
        priority = adjust_priority(conn, request_id, delta)
    console.print(f"request {request_id}: priority {priority}")


@request_app.command("abort")
def request_abort(
    request_id: RequestId,
    by: Annotated[str | None, typer.Option(help="who aborts it (kept in its reason)")] = None,
) -> None:
    """Abort a blocked, pending, scheduled or running request (its running visit
    is stopped, its origin stays in its pool), the open requests made for it
    (--parent, a workflow's), and the dependents not allowed to fail without them."""
    settings = get_settings()
    with connect(settings) as conn, refusing(RequestError):
        redis = redis_client(settings)
        aborted = cancel_request(conn, redis, settings.redis_namespace, request_id, now(), by)
    more = f" (and {len(aborted) - 1} made for it or after it)" if aborted[1:] else ""
    console.print(f"request {request_id}: aborted{more}")


request_app.command("cancel", hidden=True)(request_abort)


@request_app.command("retry")
def request_retry(request_id: RequestId) -> None:
    """Retry a failed request: a new request supersedes it (the old one is kept)."""
    with connect(get_settings()) as conn, refusing(RequestError):
        console.print(f"request {request_id}: retried as {retry_request(conn, request_id)}")
