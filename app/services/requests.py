"""One-shot visit requests: their lifecycle (seed 004) and their scheduling.

pending -> scheduled -> running -> succeeded | failed; aborted by cancel. A
failed request can be retried: a new request supersedes it and the old one is
kept. Pending requests are served in descending effective priority (base +
adjustment), then first in first out: that order is the ``take_pending_requests``
query, the one copy of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from app.db import requests as db
from app.db.connection import DictConnection
from app.db.listings import known_visit_types
from app.domain.journal_event import VisitStatusEvent
from app.domain.placement import epoch_s
from app.inputs.api import MAX_PRIORITY, MIN_PRIORITY, RequestVisit
from queues.keys import aborted_requests


class RequestError(ValueError):
    """A request operation that cannot be done; the text says why."""


def create_request(
    conn: DictConnection,
    request: RequestVisit,
    supersedes: int | None = None,
    now: datetime | None = None,
) -> int:
    """Record a pending request made at ``now`` (default: the database's clock);
    return its id (the existing one for a known external_id)."""
    known = known_visit_types(conn)
    if request.visit_type not in known:
        names = ", ".join(sorted(known))
        raise RequestError(
            f"visit_type: unknown visit type {request.visit_type!r} (known: {names})"
        )
    params = {
        "url": request.url,
        "visit_type": request.visit_type,
        "kind": request.kind,
        "base_priority": request.priority,
        "requested_by": request.requested_by,
        "extra_loader_arguments": json.dumps(request.extra_loader_arguments),
        "external_id": request.external_id,
        "supersedes": supersedes,
        "now": now,
    }
    return db.insert_request(conn, params)


def get_request(conn: DictConnection, request_id: int) -> dict[str, Any]:
    """Every field of one request."""
    row = db.request(conn, request_id)
    if row is None:
        raise RequestError(f"request_id: no request {request_id}")
    return row


def adjust_priority(conn: DictConnection, request_id: int, delta: int) -> int:
    """Add ``delta`` to a pending request's adjustment; return its effective priority.

    The effective priority must stay within MIN_PRIORITY..MAX_PRIORITY, the
    bounds of a new request's, so an adjustment cannot overflow or outrank
    every request by any margin.
    """
    if abs(delta) <= MAX_PRIORITY - MIN_PRIORITY:
        priority = db.adjust_priority(conn, request_id, delta, MIN_PRIORITY, MAX_PRIORITY)
        if priority is not None:
            return priority
    old = get_request(conn, request_id)
    if old["status"] != "pending":
        raise RequestError(f"request_id: request {request_id} is {old['status']}, not pending")
    raise RequestError(
        f"delta: priority {old['priority']} {delta:+d} is outside {MIN_PRIORITY}..{MAX_PRIORITY}"
    )


def cancel_request(
    conn: DictConnection, client: redis.Redis, namespace: str, request_id: int, now: datetime
) -> None:
    """Abort a pending or scheduled request (a worker that receives it skips it)."""
    if not db.cancel_request(conn, request_id, now):
        raise RequestError(f"request_id: no pending or scheduled request {request_id}")
    client.sadd(aborted_requests(namespace), request_id)


def end_unvisited_request(
    conn: DictConnection, request_id: int, reason: str, now: datetime
) -> bool:
    """Fail a request sent to a loader whose storage publishes the statuses (the
    archive's) when its visit never reached that storage: no status will end it."""
    return db.end_unvisited_request(conn, request_id, reason[:500], now)


def retry_request(conn: DictConnection, request_id: int) -> int:
    """Make a new request superseding a failed one (kept for inspection); return its id."""
    old = get_request(conn, request_id)
    if old["status"] != "failed":
        raise RequestError(f"request_id: request {request_id} is {old['status']}, not failed")
    if old["superseded_by"] is not None:
        raise RequestError(f"request_id: request {request_id} was already retried")
    retry = RequestVisit(
        url=old["url"],
        visit_type=old["visit_type"],
        priority=old["base_priority"] + old["priority_adjustment"],
        kind=old["kind"],
        requested_by=old["requested_by"],
        extra_loader_arguments=old["extra_loader_arguments"],
    )
    with conn.transaction():
        new_id = create_request(conn, retry, supersedes=request_id)
        db.supersede_request(conn, request_id, new_id)
    return new_id


@dataclass(frozen=True)
class TakenRequest:
    """A request the scheduler just sent to a worker."""

    id: int
    url: str
    visit_type: str
    arguments: dict[str, Any]
    priority: int


def take_pending(
    conn: DictConnection, visit_type: str, limit: int, now: datetime, visit: int | None = None
) -> list[TakenRequest]:
    """Mark up to ``limit`` pending requests scheduled, best first, as sent in visit
    number ``visit`` (None: the first visit created after now is theirs); return them."""
    if limit <= 0:
        return []
    rows = db.take_pending_requests(conn, visit_type, limit, now, visit)
    rows.sort(key=lambda r: (-r["priority"], r["id"]))
    return [
        TakenRequest(
            r["id"], r["url"], r["visit_type"], dict(r["extra_loader_arguments"]), r["priority"]
        )
        for r in rows
    ]


@dataclass(frozen=True)
class FinishedRequest:
    """A request whose visit ended: how long from request to completed visit."""

    id: int
    kind: str
    visit_type: str
    latency_s: float


def follow_visits(conn: DictConnection, events: list[VisitStatusEvent]) -> list[FinishedRequest]:
    """Move requests along with the visits the journal reports (inside the caller's
    transaction); return those that ended."""
    open_origins = db.open_request_origins(conn)
    if not open_origins:
        return []
    events = [e for e in events if (e.origin, e.visit_type) in open_origins]
    # A request's visit is the first created after it was scheduled: a visit
    # already under way then (a recurrent one) neither starts nor ends it.
    started = [e for e in events if e.status == "created"]
    finished = [e for e in events if e.is_final]
    if started:
        db.requests_started(conn, started)
    if not finished:
        return []
    rows = db.requests_finished(conn, finished, [_reason(e) for e in finished])
    return [
        FinishedRequest(
            r["id"], r["kind"], r["visit_type"], epoch_s(r["finished_at"]) - epoch_s(r["created"])
        )
        for r in rows
    ]


def _reason(event: VisitStatusEvent) -> str | None:
    error = (event.metadata or {}).get("error")
    return str(error).replace("\x00", "")[:500] if error is not None else None
