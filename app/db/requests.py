"""One-shot visit requests in PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from app.db.connection import DictConnection
from app.db.history_codec import decode_history
from app.db.queries import query
from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_history import VisitHistory
from app.domain.visit_status import SUCCESS_STATUSES


def insert_request(conn: DictConnection, params: dict[str, Any]) -> tuple[int, bool]:
    """Record a request (``params["status"]``: pending or blocked); its id and
    whether it is new (the existing one's for a known external_id)."""
    with conn.transaction():
        row = conn.execute(query("insert_request"), params).fetchone()
        if row is not None:
            return int(row["id"]), True
        existing = request_by_external_id(conn, params["external_id"])
        assert existing is not None
        return existing, False


def request_by_external_id(conn: DictConnection, external_id: str | None) -> int | None:
    """The id of the request made with this caller's key, None if none."""
    if external_id is None:
        return None
    row = conn.execute(query("request_by_external_id"), {"external_id": external_id}).fetchone()
    return None if row is None else int(row["id"])


def lock_request_graph(conn: DictConnection) -> None:
    """Serialise, until the caller's transaction ends, the changes that read the
    dependency edges (creating, ending, cancelling, retrying requests)."""
    conn.execute(query("lock_request_graph"))


def prerequisites(conn: DictConnection, ids: list[int]) -> list[dict[str, Any]]:
    """id, status and superseded_by of these requests (read under the graph
    lock: none of them ends meanwhile)."""
    return conn.execute(query("prerequisites"), {"ids": ids}).fetchall()


def reaches(conn: DictConnection, ids: list[int], target: int) -> bool:
    """Whether ``target`` is one of ``ids`` or among their prerequisites, transitively."""
    row = conn.execute(query("reaches"), {"ids": ids, "target": target}).fetchone()
    return bool(row and row["found"])


def insert_dependencies(
    conn: DictConnection, request_id: int, prerequisites: list[int], allowed_to_fail: list[int]
) -> None:
    """Make ``request_id`` wait for ``prerequisites`` (those in ``allowed_to_fail`` may fail)."""
    params = {"id": request_id, "ids": prerequisites, "allowed": allowed_to_fail}
    conn.execute(query("insert_dependencies"), params)


def dependencies(
    conn: DictConnection, request_id: int, dependents: bool = False
) -> list[dict[str, Any]]:
    """id, allowed_to_fail, status and url of a request's prerequisites (or dependents)."""
    params = {"id": request_id, "dependents": dependents}
    return conn.execute(query("request_dependencies"), params).fetchall()


def abort_dependents(conn: DictConnection, ended: list[int]) -> list[int]:
    """Abort the blocked dependents that needed one of ``ended`` to succeed; their ids."""
    return [r["id"] for r in conn.execute(query("abort_dependents"), {"ids": ended})]


def release_dependents(conn: DictConnection, ended: list[int]) -> list[int]:
    """Make pending the blocked dependents of ``ended`` whose prerequisites all
    completed; their ids."""
    return [r["id"] for r in conn.execute(query("release_dependents"), {"ids": ended})]


def repoint_dependencies(conn: DictConnection, request_id: int, new_id: int) -> None:
    """Make the dependents of ``request_id`` wait for ``new_id`` instead."""
    conn.execute(query("repoint_dependencies"), {"id": request_id, "new_id": new_id})


def revive_aborted(conn: DictConnection, request_id: int) -> list[int]:
    """Put back to blocked the requests aborted because ``request_id`` failed
    (transitively); the prerequisites of those requests."""
    return [r["id"] for r in conn.execute(query("revive_aborted"), {"id": request_id})]


def request(conn: DictConnection, request_id: int) -> dict[str, Any] | None:
    """Every field of one request, None if there is none of that id."""
    return conn.execute(query("get_request"), {"id": request_id}).fetchone()


def list_requests(conn: DictConnection, status: str | None, limit: int) -> list[dict[str, Any]]:
    """Requests, pending ones first in the order they will be served."""
    return conn.execute(query("list_requests"), {"status": status, "limit": limit}).fetchall()


def adjust_priority(
    conn: DictConnection, request_id: int, delta: int, low: int, high: int
) -> int | None:
    """Add ``delta`` to a blocked or pending request's adjustment if its effective priority stays
    within ``low``..``high``; that priority, or None if nothing changed."""
    params = {"id": request_id, "delta": delta, "min": low, "max": high}
    row = conn.execute(query("adjust_priority"), params).fetchone()
    return None if row is None else int(row["priority"])


def abort_request(conn: DictConnection, request_id: int, reason: str, now: datetime) -> str | None:
    """Abort a blocked, pending, scheduled or running request; the status it had,
    None if there is no such request."""
    params = {"id": request_id, "reason": reason, "now": now}
    row = conn.execute(query("abort_request"), params).fetchone()
    return None if row is None else str(row["was"])


def abort_children(conn: DictConnection, request_id: int, now: datetime) -> dict[int, str]:
    """Abort the open requests made for ``request_id``, transitively; the status
    each had, by id."""
    params = {"id": request_id, "now": now}
    return {r["id"]: str(r["was"]) for r in conn.execute(query("abort_children"), params)}


def end_unvisited_request(
    conn: DictConnection, request_id: int, reason: str, now: datetime
) -> bool:
    """Fail a scheduled request whose visit no journal will report; False if it
    is not one (any more)."""
    params = {"id": request_id, "reason": reason, "now": now}
    return conn.execute(query("end_unvisited_request"), params).fetchone() is not None


def release_request_origins(conn: DictConnection, ids: list[int]) -> list[dict[str, Any]]:
    """Take out of flight the origins of requests whose visits stopped with no
    final status, unless sent again since; their mirror columns (none if left)."""
    return conn.execute(query("release_request_origins"), {"ids": ids}).fetchall()


def requests_past_deadline(
    conn: DictConnection, visit_type: str, sent_before: datetime
) -> list[dict[str, Any]]:
    """id, url and scheduled_at of the requests of ``visit_type`` sent before
    ``sent_before`` with no final status since."""
    params = {"visit_type": visit_type, "sent_before": sent_before}
    return conn.execute(query("requests_past_deadline"), params).fetchall()


def requests_pending_again(
    conn: DictConnection, ids: list[int], sent_before: datetime
) -> list[int]:
    """Make pending again those of these requests still sent before
    ``sent_before`` with no final status; their ids."""
    params = {"ids": ids, "sent_before": sent_before}
    return [r["id"] for r in conn.execute(query("requests_pending_again"), params)]


def supersede_request(conn: DictConnection, request_id: int, new_id: int) -> None:
    """Record that request ``new_id`` retries request ``request_id``."""
    conn.execute(query("supersede_request"), {"id": request_id, "new_id": new_id})


def take_pending_requests(
    conn: DictConnection,
    visit_type: str,
    limit: int,
    now: datetime,
    visit: int | None,
    lost_before: datetime,
) -> list[dict[str, Any]]:
    """Mark up to ``limit`` pending requests of ``visit_type`` scheduled, sent as
    visit number ``visit`` (None: not known yet), one per origin and none whose
    origin is in flight (sent after ``lost_before``, no final status since, or
    another request of it sent after then and not ended); their rows."""
    params = {
        "visit_type": visit_type,
        "limit": limit,
        "now": now,
        "visit": visit,
        "lost_before": lost_before,
    }
    with conn.transaction():
        return conn.execute(query("take_pending_requests"), params).fetchall()


def mark_requested_origins_scheduled(
    conn: DictConnection, origins: list[tuple[str, str]], now: datetime
) -> list[dict[str, Any]]:
    """Stamp ``last_scheduled`` on the stats rows of these (url, visit_type)
    origins (those that have one); their mirror columns."""
    params = {
        "urls": [url for url, _ in origins],
        "visit_types": [visit_type for _, visit_type in origins],
        "now": now,
    }
    return conn.execute(query("mark_requested_origins_scheduled"), params).fetchall()


def open_request_origins(conn: DictConnection) -> set[tuple[str, str]]:
    """The (url, visit_type) of every request not yet done."""
    return {(r["url"], r["visit_type"]) for r in conn.execute(query("open_request_origins"))}


def requests_started(
    conn: DictConnection, started: list[VisitStatusEvent], skew: timedelta
) -> list[dict[str, Any]]:
    """Mark running the scheduled requests whose visit these events created (at
    most ``skew`` before the request was sent); their id, url, visit_type, visit."""
    params = {**_event_columns(started), "skew": skew}
    return conn.execute(query("requests_started"), params).fetchall()


def visit_histories(
    conn: DictConnection, origins: list[tuple[str, str]]
) -> dict[tuple[str, str], VisitHistory]:
    """The stored visit history of each (url, visit_type) origin that has one."""
    params = {
        "urls": [url for url, _ in origins],
        "visit_types": [visit_type for _, visit_type in origins],
    }
    return {
        (r["url"], r["visit_type"]): decode_history(r["visit_history"])
        for r in conn.execute(query("visit_histories"), params)
    }


def requests_finished(
    conn: DictConnection, finished: list[VisitStatusEvent], reasons: list[str | None]
) -> list[dict[str, Any]]:
    """End the running requests whose visit these events ended (``reasons`` their
    errors); the rows of the requests ended."""
    params = {
        **_event_columns(finished),
        "statuses": [e.status for e in finished],
        "reasons": reasons,
        "success": sorted(SUCCESS_STATUSES),
    }
    return conn.execute(query("requests_finished"), params).fetchall()


def _event_columns(events: list[VisitStatusEvent]) -> dict[str, list[Any]]:
    """The events' visits as parallel arrays: urls, visit_types, visits, dates."""
    return {
        "urls": [e.origin for e in events],
        "visit_types": [e.visit_type for e in events],
        "visits": [e.visit for e in events],
        "dates": [e.date for e in events],
    }


def insert_listing_request(conn: DictConnection, params: dict[str, Any]) -> int:
    """Record a lister's next full listing as a running request; its id."""
    row = conn.execute(query("insert_listing_request"), params).fetchone()
    assert row is not None
    return int(row["id"])


def open_listing_request(conn: DictConnection, lister_id: UUID) -> int | None:
    """The running listing request of a lister, None if none."""
    row = conn.execute(query("open_listing_request"), {"lister_id": lister_id}).fetchone()
    return None if row is None else int(row["id"])


def insert_first_visits(
    conn: DictConnection, parent: int, origins: list[tuple[str, str]], now: datetime
) -> None:
    """Make the (url, visit_type) origins' first visits children of ``parent``,
    blocked until it ends (one per origin)."""
    params = {
        "parent": parent,
        "urls": [url for url, _ in origins],
        "visit_types": [visit_type for _, visit_type in origins],
        "now": now,
    }
    conn.execute(query("insert_first_visits"), params)


def end_listing_request(
    conn: DictConnection, lister_id: UUID, error: str | None, now: datetime
) -> list[int]:
    """End the running listing request of a lister (failed with ``error`` if one); its id."""
    params = {"lister_id": lister_id, "error": error, "now": now}
    return [r["id"] for r in conn.execute(query("end_listing_request"), params)]


def children(conn: DictConnection, request_id: int, limit: int) -> list[dict[str, Any]]:
    """The requests made for ``request_id`` per status: count and the first ``limit``."""
    return conn.execute(query("children"), {"id": request_id, "limit": limit}).fetchall()
