"""One-shot visit requests: their lifecycle (seed 004) and their scheduling.

blocked -> pending -> scheduled -> running -> succeeded | failed; aborted by
cancel, or when a prerequisite not allowed to fail did not succeed. A request
naming prerequisites waits blocked until each completed (succeeded, or failed
or aborted where allowed to). A failed request can be retried: a new request
supersedes it (the old one is kept), its dependents wait for the new one, and
those aborted because it failed are blocked again. Pending requests are served
in descending effective priority (base + adjustment), then first in first out:
that order is the ``take_pending_requests`` query, the one copy of it.
"""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from app.db import requests as db
from app.db.connection import DictConnection
from app.db.listings import known_visit_types, mirror_row
from app.domain.cooldown import request_window_s
from app.domain.journal_event import VisitStatusEvent
from app.domain.lanes import MAX_TIME_LIMIT_S
from app.domain.placement import epoch_s
from app.domain.workflows import TEMPLATES, WorkflowTemplate
from app.inputs.api import MAX_PRIORITY, MIN_PRIORITY, RequestVisit
from app.inputs.rules import without_userinfo
from app.services.context import Context
from app.services.mirror_sync import place_rows
from queues.errors import Redis
from queues.workers import abort

log = logging.getLogger("revisit.requests")

#: How far the clock of a loader's host may be behind the scheduler's: a visit
#: whose created status is dated up to this long before its request was sent is
#: still taken for the request's own (hosts kept by NTP agree within
#: milliseconds). Every other visit of the origin that could end after the
#: send (one presumed lost, one not sent by revisit, one whose checkpoint
#: ended its flight) started long before it, so this margin lets none of them
#: end the request.
CLOCK_SKEW_S = 60.0


class RequestError(ValueError):
    """A request operation that cannot be done; the text says why."""


def create_request(
    conn: DictConnection,
    request: RequestVisit,
    supersedes: int | None = None,
    now: datetime | None = None,
) -> int:
    """Record a request made at ``now`` (default: the database's clock): pending,
    or blocked while a prerequisite has not completed; return its id (the
    existing one for a known external_id).

    Refused, with nothing written: an unknown visit type, prerequisite or
    parent; a prerequisite that was retried (depend on its retry), aborted, or
    failed and not allowed to; a dependency closing a cycle.
    """
    known = known_visit_types(conn)
    if request.visit_type not in known:
        names = ", ".join(sorted(known))
        raise RequestError(
            f"visit_type: unknown visit type {request.visit_type!r} (known: {names})"
        )
    prerequisites = list(dict.fromkeys(request.depends_on))
    with conn.transaction():
        if prerequisites:
            db.lock_request_graph(conn)
        existing = db.request_by_external_id(conn, request.external_id)
        if existing is not None:
            if prerequisites and db.reaches(conn, prerequisites, existing):
                raise RequestError(
                    f"depends_on: request {existing} (external_id {request.external_id!r}) "
                    "would wait for itself: a cycle"
                )
            return existing
        blocked = _check_prerequisites(conn, prerequisites, set(request.allowed_to_fail))
        params = {
            "url": request.url,
            "visit_type": request.visit_type,
            "kind": request.kind,
            "base_priority": _base_priority(conn, request),
            "requested_by": request.requested_by,
            "extra_loader_arguments": json.dumps(request.extra_loader_arguments),
            "external_id": request.external_id,
            "supersedes": supersedes,
            "parent": request.parent,
            "status": "blocked" if blocked else "pending",
            "now": now,
        }
        request_id, new = db.insert_request(conn, params)
        if new and prerequisites:
            db.insert_dependencies(conn, request_id, prerequisites, request.allowed_to_fail)
    return request_id


def _check_prerequisites(conn: DictConnection, ids: list[int], allowed: set[int]) -> bool:
    """Refuse prerequisites a request cannot wait for; whether one has not completed."""
    if not ids:
        return False
    rows = {r["id"]: r for r in db.prerequisites(conn, ids)}
    unknown = [str(i) for i in ids if i not in rows]
    if unknown:
        raise RequestError(f"depends_on: no request {', '.join(unknown)}")
    for i in ids:
        row = rows[i]
        if row["superseded_by"] is not None:
            raise RequestError(
                f"depends_on: request {i} was retried as request {row['superseded_by']}: "
                "depend on that one"
            )
        if row["status"] == "aborted":
            raise RequestError(f"depends_on: request {i} is aborted")
        if row["status"] == "failed" and i not in allowed:
            raise RequestError(f"depends_on: request {i} failed (retry it, or allow it to fail)")
    return any(rows[i]["status"] not in ("succeeded", "failed") for i in ids)


def _base_priority(conn: DictConnection, request: RequestVisit) -> int:
    """The priority asked for, else the parent's effective priority, else its
    kind's workflow template's, else 0 (seed 004). Refused: a parent unknown,
    aborted or retried."""
    parent = None if request.parent is None else db.request(conn, request.parent)
    if request.parent is not None:
        if parent is None:
            raise RequestError(f"parent: no request {request.parent}")
        if parent["status"] == "aborted":
            raise RequestError(f"parent: request {request.parent} is aborted")
        if parent["superseded_by"] is not None:
            raise RequestError(
                f"parent: request {request.parent} was retried as request "
                f"{parent['superseded_by']}: make it for that one"
            )
    if request.priority is not None:
        return request.priority
    if parent is not None:
        return int(parent["priority"])
    template = TEMPLATES.get(request.kind)
    return 0 if template is None else template.priority


def _settle(conn: DictConnection, ended: list[int]) -> list[int]:
    """Abort or release the blocked dependents of requests that just ended, and
    the dependents of those aborted, transitively (inside the caller's
    transaction, holding the graph lock); every id ended or aborted."""
    seen = list(ended)
    while ended:
        aborted = db.abort_dependents(conn, ended)
        db.release_dependents(conn, ended)
        seen += aborted
        ended = aborted
    return seen


def get_request(conn: DictConnection, request_id: int) -> dict[str, Any]:
    """Every field of one request."""
    row = db.request(conn, request_id)
    if row is None:
        raise RequestError(f"request_id: no request {request_id}")
    return row


def adjust_priority(conn: DictConnection, request_id: int, delta: int) -> int:
    """Add ``delta`` to a blocked or pending request's adjustment (or a listing's
    under way: the first visits it makes after take its priority); return its
    effective priority.

    The effective priority must stay within MIN_PRIORITY..MAX_PRIORITY, the
    bounds of a new request's, so an adjustment cannot overflow or outrank
    every request by any margin.
    """
    if abs(delta) <= MAX_PRIORITY - MIN_PRIORITY:
        priority = db.adjust_priority(conn, request_id, delta, MIN_PRIORITY, MAX_PRIORITY)
        if priority is not None:
            return priority
    old = get_request(conn, request_id)
    listing = old["status"] == "running" and old["lister_id"] is not None
    if old["status"] not in ("blocked", "pending") and not listing:
        raise RequestError(
            f"request_id: request {request_id} is {old['status']}, not blocked or pending"
        )
    raise RequestError(
        f"delta: priority {old['priority']} {delta:+d} is outside {MIN_PRIORITY}..{MAX_PRIORITY}"
    )


def cancel_request(
    conn: DictConnection,
    client: Redis,
    namespace: str,
    request_id: int,
    now: datetime,
    by: str | None = None,
) -> list[int]:
    """Abort a blocked, pending, scheduled or running request (``by``: who, kept in
    its reason), the open requests made for it (its children, transitively, even
    when it ended itself: a workflow's listing), and their dependents not allowed
    to fail without them; the ids aborted.

    A worker that receives one of them skips it; one running its visit stops it
    and publishes no final status, so the visit neither fails the origin's stats
    nor counts as a visit outcome; either puts the origin back where it was
    before the request's visit was sent (``release_request_origin``).
    """
    reason = f"aborted by {by}" if by else "aborted"
    with conn.transaction():
        db.lock_request_graph(conn)
        was = db.abort_request(conn, request_id, reason[:500], now)
        # A workflow's request that ended (its listing) may still have open children.
        children = db.abort_children(conn, request_id, now)
        if was is None and not children:
            raise RequestError(
                f"request_id: no blocked, pending, scheduled or running request {request_id} "
                "nor one made for it"
            )
        ended = [request_id] if was is not None else []
        aborted = _settle(conn, [*ended, *children])
    # Only a scheduled or running request can be at a worker (blocked ones were never sent).
    sent = [i for i, s in {request_id: was, **children}.items() if s in ("scheduled", "running")]
    if sent:
        abort(client, namespace, sent)
    return aborted


def end_unvisited_request(
    conn: DictConnection, ctx: Context, request_id: int, reason: str, now: datetime
) -> bool:
    """Fail a request sent to a loader whose storage publishes the statuses (the
    archive's) when its visit never reached that storage: no status will end it,
    nor take its origin out of flight (``release_request_origin``)."""
    with conn.transaction():
        db.lock_request_graph(conn)
        ended = db.end_unvisited_request(conn, request_id, reason[:500], now)
        if ended:
            _settle(conn, [request_id])
    if ended:
        release_request_origin(conn, ctx, request_id, now)
    return ended


def release_request_origin(
    conn: DictConnection, ctx: Context, request_id: int, now: datetime
) -> None:
    """Put back where it belongs the origin of a request whose visit stopped with
    no final status (aborted, or never reached the archive), as if it had not
    been sent, unless it was sent again since: else it would stay in flight
    until the scheduled cooldown presumed the visit lost. Redis follows the
    commit, so the mirror never has it out of flight before PostgreSQL."""
    with conn.transaction():
        rows = db.release_request_origins(conn, [request_id])
    place_rows(ctx, map(mirror_row, rows), now)


def requests_past_deadline(
    conn: DictConnection, ctx: Context, visit_type: str, time_limit_s: float, now: datetime
) -> list[int]:
    """Make pending again the requests of ``visit_type`` with no final status
    ``request_window_s`` after they were sent (``time_limit_s``: their lane's),
    presumed lost (a message gone with a wiped broker, a worker killed), and put
    their origins back as ``release_request_origin`` does; their ids. Their
    visits start and end within that window (the worker's ``start_within_s``
    and ``finish_by_s``), so none still runs when it is sent again."""
    try:
        sent_before = now - timedelta(seconds=request_window_s(time_limit_s))
    except OverflowError:  # a limit no visit reaches (the simulator's): none is late
        return []
    overdue = db.requests_past_deadline(conn, visit_type, sent_before)
    if not overdue:
        return []
    ids = [r["id"] for r in overdue]
    # Stats rows before request rows, as the journal locks them.
    with conn.transaction():
        rows = db.release_request_origins(conn, ids)
        again = db.requests_pending_again(conn, ids, sent_before)
    place_rows(ctx, map(mirror_row, rows), now)
    for r in overdue:
        if r["id"] in again:
            log.warning(
                "request %d (%s): no final status since it was sent at %s, past its deadline; "
                "pending again",
                r["id"],
                without_userinfo(r["url"]),
                r["scheduled_at"].isoformat(),
            )
    return again


def retry_request(conn: DictConnection, request_id: int) -> int:
    """Make a new request superseding a failed one (kept for inspection); return its id.

    The failed request's dependents wait for the new one instead, and those
    aborted because it failed (transitively) are blocked again.
    """
    with conn.transaction():
        db.lock_request_graph(conn)
        old = get_request(conn, request_id)
        if old["lister_id"] is not None:
            raise RequestError(
                f"request_id: request {request_id} is a listing: add the forge again instead"
            )
        if old["status"] != "failed":
            raise RequestError(f"request_id: request {request_id} is {old['status']}, not failed")
        if old["superseded_by"] is not None:
            raise RequestError(f"request_id: request {request_id} was already retried")
        retry = RequestVisit(
            url=old["url"],
            visit_type=old["visit_type"],
            priority=old["priority"],
            kind=old["kind"],
            requested_by=old["requested_by"],
            extra_loader_arguments=old["extra_loader_arguments"],
            parent=old["parent"],
        )
        new_id = create_request(conn, retry, supersedes=request_id)
        db.supersede_request(conn, request_id, new_id)
        db.repoint_dependencies(conn, request_id, new_id)
        # A revived request with another prerequisite that failed meanwhile is
        # aborted again by it: settling their prerequisites decides.
        _settle(conn, db.revive_aborted(conn, request_id))
    return new_id


def start_listing_request(
    conn: DictConnection,
    lister_id: UUID,
    url: str,
    template: WorkflowTemplate,
    priority: int | None,
    requested_by: str | None,
    now: datetime,
) -> int:
    """Record the lister's next full listing as a running request of ``template``'s
    kind (its priority unless ``priority``); return its id. The listing makes the
    first visits of what it lists its children (``request_first_visits``) and
    releases them when it ends (``end_listing_request``).

    Refused, with nothing written: a lister with a listing request under way.
    """
    with conn.transaction():
        db.lock_request_graph(conn)
        under_way = db.open_listing_request(conn, lister_id)
        if under_way is not None:
            raise RequestError(f"lister: its listing is already request {under_way}, under way")
        params = {
            "url": url,
            "lister_id": lister_id,
            "kind": template.kind,
            "base_priority": template.priority if priority is None else priority,
            "requested_by": requested_by,
            "now": now,
        }
        return db.insert_listing_request(conn, params)


def request_first_visits(
    conn: DictConnection, lister_id: UUID, origins: list[tuple[str, str]], now: datetime
) -> None:
    """Make the first visits of these (url, visit_type) origins, which a full
    listing of the lister just recorded, requests waiting for its listing
    request, if it has one under way."""
    with conn.transaction():
        db.lock_request_graph(conn)
        listing = db.open_listing_request(conn, lister_id)
        if listing is not None and origins:
            db.insert_first_visits(conn, listing, origins, now)


def end_listing_request(
    conn: DictConnection, lister_id: UUID, error: str | None, now: datetime
) -> None:
    """End the lister's listing request, if it has one under way: succeeded (its
    first visits become pending), or failed with ``error`` (they are aborted)."""
    with conn.transaction():
        db.lock_request_graph(conn)
        _settle(conn, db.end_listing_request(conn, lister_id, error and error[:500], now))


@dataclass(frozen=True)
class TakenRequest:
    """A request the scheduler just sent to a worker."""

    id: int
    url: str
    visit_type: str
    arguments: dict[str, Any]
    priority: int


def take_pending(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    limit: int,
    now: datetime,
    visit: int | None = None,
    time_limit_s: float = MAX_TIME_LIMIT_S,
) -> list[TakenRequest]:
    """Mark up to ``limit`` pending requests scheduled, best first, as sent in visit
    number ``visit`` (None: the first visit created after now is theirs); return them.

    One visit of an origin at a time: a request whose origin is in flight (a
    recurrent visit, or another request's) stays pending until that visit's
    final status is applied, and the origin of a request sent moves in flight
    as a recurrent pick's does, so the recurrent scheduler leaves it until
    then; its final status places it back as any visit's. The mirror is moved
    before the commit (as a pop is before its mark): if this process dies in
    between, the origin returns to its place after the scheduled cooldown.

    A request waits for a visit in flight only as long as a request's own visit
    may take (``request_window_s`` of ``time_limit_s``, its visit type's limit),
    not the scheduled cooldown: a recurrent visit that has not reported by then
    is taken for lost (its message gone), and the request is sent. A late final
    status of that visit cannot end the request, whose own visit alone does.
    A recurrent message that was only delayed (its workers down past the
    window) is dropped by the worker that takes it (``actors.visiting``): the
    origin was sent again since, so it never runs beside the request's visit.
    """
    if limit <= 0:
        return []
    lost_before = now - ctx.cooldowns.scheduled
    with suppress(OverflowError):  # a limit no visit reaches (the simulator's): the cooldown
        # A request sent exactly a window ago is not yet past its deadline
        # (requests_past_deadline): its origin is still in flight.
        window = timedelta(seconds=request_window_s(time_limit_s), microseconds=1)
        lost_before = max(lost_before, now - window)
    with conn.transaction():
        rows = db.take_pending_requests(conn, visit_type, limit, now, visit, lost_before)
        if rows:
            origins = [(str(r["url"]), str(r["visit_type"])) for r in rows]
            marked = db.mark_requested_origins_scheduled(conn, origins, now)
            place_rows(ctx, map(mirror_row, marked), now)
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
    if not started and not finished:
        return []
    # Before any request row is locked, as on every path that takes it: a
    # request row locked first could deadlock with a request being created.
    db.lock_request_graph(conn)
    if started:
        begun = db.requests_started(conn, started, timedelta(seconds=CLOCK_SKEW_S))
        finished += _ended_before_created(conn, begun)
    if not finished:
        return []
    rows = db.requests_finished(conn, finished, [_reason(e) for e in finished])
    _settle(conn, [r["id"] for r in rows])
    return [
        FinishedRequest(
            r["id"], r["kind"], r["visit_type"], epoch_s(r["finished_at"]) - epoch_s(r["created"])
        )
        for r in rows
    ]


def _ended_before_created(
    conn: DictConnection, begun: list[dict[str, Any]]
) -> list[VisitStatusEvent]:
    """The final statuses, already applied, of the visits that just started
    requests: a visit's final status may arrive before its created status
    (another partition), when it could not yet tell whose visit it was. The
    stored history keeps no error: such a failed request's reason is its status."""
    if not begun:
        return []
    histories = db.visit_histories(conn, [(r["url"], r["visit_type"]) for r in begun])
    ended = []
    for r in begun:
        history = histories.get((r["url"], r["visit_type"]))
        for final in history.recent if history is not None else ():
            if final.visit == r["visit"]:
                event = VisitStatusEvent(
                    r["url"], r["visit_type"], final.visit, final.date, final.status, None
                )
                ended.append(event)
    return ended


def _reason(event: VisitStatusEvent) -> str | None:
    error = (event.metadata or {}).get("error")
    return str(error).replace("\x00", "")[:500] if error is not None else None
