"""Operators' control of single origins: disable, enable, visit now.

Postgres first, then the mirror (the same placement rule as listings and the
journal), so a disabled origin leaves its pool at once and no later listing
brings it back until it is enabled.
"""

from __future__ import annotations

from datetime import datetime

from app.db import origins as db
from app.db.connection import DictConnection
from app.inputs.api import RequestVisit
from app.services.context import Context
from app.services.mirror_sync import place_rows
from app.services.requests import RequestError, create_request


def set_disabled(
    conn: DictConnection,
    ctx: Context,
    url: str,
    visit_type: str | None,
    now: datetime,
    *,
    disabled: bool,
) -> list[str]:
    """Disable (or enable) ``url`` for one or every visit type; return the visit
    types changed (empty: no such origin)."""
    rows = db.set_disabled(conn, url, visit_type, disabled=disabled)
    place_rows(ctx, rows, now)
    return sorted({r.visit_type for r in rows})


def send_visits(
    conn: DictConnection, urls: list[str], visit_type: str | None, priority: int
) -> list[tuple[str, str, int]]:
    """Ask for a one-shot visit of each URL (of ``visit_type``, or of every visit
    type it is known with), all or none; return (url, visit type, request id)."""
    wanted: list[RequestVisit] = []
    for url in urls:
        types = [visit_type] if visit_type is not None else db.visit_types_of(conn, url)
        if not types:
            raise RequestError(f"URL: {url!r} is not a known origin; give --visit-type")
        wanted += [
            RequestVisit(url=url, visit_type=vt, priority=priority, kind="operator") for vt in types
        ]
    with conn.transaction():
        return [(r.url, r.visit_type, create_request(conn, r)) for r in wanted]
