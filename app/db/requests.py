"""One-shot visit requests in PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_status import SUCCESS_STATUSES


def insert_request(conn: DictConnection, params: dict[str, Any]) -> int:
    """Record a pending request; its id (the existing one for a known external_id)."""
    with conn.transaction():
        row = conn.execute(query("insert_request"), params).fetchone()
        if row is None:
            row = conn.execute(
                query("request_by_external_id"), {"external_id": params["external_id"]}
            ).fetchone()
        assert row is not None
        return int(row["id"])


def request(conn: DictConnection, request_id: int) -> dict[str, Any] | None:
    """Every field of one request, None if there is none of that id."""
    return conn.execute(query("get_request"), {"id": request_id}).fetchone()


def list_requests(conn: DictConnection, status: str | None, limit: int) -> list[dict[str, Any]]:
    """Requests, pending ones first in the order they will be served."""
    return conn.execute(query("list_requests"), {"status": status, "limit": limit}).fetchall()


def adjust_priority(
    conn: DictConnection, request_id: int, delta: int, low: int, high: int
) -> int | None:
    """Add ``delta`` to a pending request's adjustment if its effective priority stays
    within ``low``..``high``; that priority, or None if nothing changed."""
    params = {"id": request_id, "delta": delta, "min": low, "max": high}
    row = conn.execute(query("adjust_priority"), params).fetchone()
    return None if row is None else int(row["priority"])


def cancel_request(conn: DictConnection, request_id: int, now: datetime) -> bool:
    """Abort a pending or scheduled request; False if there is no such request."""
    return (
        conn.execute(query("cancel_request"), {"id": request_id, "now": now}).fetchone() is not None
    )


def end_unvisited_request(
    conn: DictConnection, request_id: int, reason: str, now: datetime
) -> bool:
    """Fail a scheduled request whose visit no journal will report; False if it
    is not one (any more)."""
    params = {"id": request_id, "reason": reason, "now": now}
    return conn.execute(query("end_unvisited_request"), params).fetchone() is not None


def supersede_request(conn: DictConnection, request_id: int, new_id: int) -> None:
    """Record that request ``new_id`` retries request ``request_id``."""
    conn.execute(query("supersede_request"), {"id": request_id, "new_id": new_id})


def take_pending_requests(
    conn: DictConnection, visit_type: str, limit: int, now: datetime, visit: int | None
) -> list[dict[str, Any]]:
    """Mark up to ``limit`` pending requests of ``visit_type`` scheduled, sent as
    visit number ``visit`` (None: not known yet); their rows."""
    params = {"visit_type": visit_type, "limit": limit, "now": now, "visit": visit}
    with conn.transaction():
        return conn.execute(query("take_pending_requests"), params).fetchall()


def open_request_origins(conn: DictConnection) -> set[tuple[str, str]]:
    """The (url, visit_type) of every request not yet done."""
    return {(r["url"], r["visit_type"]) for r in conn.execute(query("open_request_origins"))}


def requests_started(conn: DictConnection, started: list[VisitStatusEvent]) -> None:
    """Mark running the scheduled requests whose visit these events created."""
    conn.execute(
        query("requests_started"),
        {
            "urls": [e.origin for e in started],
            "visit_types": [e.visit_type for e in started],
            "visits": [e.visit for e in started],
            "dates": [e.date for e in started],
        },
    )


def requests_finished(
    conn: DictConnection, finished: list[VisitStatusEvent], reasons: list[str | None]
) -> list[dict[str, Any]]:
    """End the running requests whose visit these events ended (``reasons`` their
    errors); the rows of the requests ended."""
    return conn.execute(
        query("requests_finished"),
        {
            "urls": [e.origin for e in finished],
            "visit_types": [e.visit_type for e in finished],
            "visits": [e.visit for e in finished],
            "dates": [e.date for e in finished],
            "statuses": [e.status for e in finished],
            "reasons": reasons,
            "success": sorted(SUCCESS_STATUSES),
        },
    ).fetchall()
