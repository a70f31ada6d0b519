"""Operators' control of single origins: disable, enable, visit now.

Postgres first, then the mirror (the same placement rule as listings and the
journal), so a disabled origin leaves its pool at once and no later listing
brings it back until it is enabled.
"""

from __future__ import annotations

from datetime import datetime

from app.api_models import RequestVisit
from app.context import Context
from app.db.connection import DictConnection
from app.db.listings import mirror_row
from app.db.queries import query
from app.listing import place_rows
from app.requests import RequestError, create_request


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
    params = {"url": url, "visit_type": visit_type, "disabled": disabled}
    with conn.transaction():
        rows = [mirror_row(r) for r in conn.execute(query("set_origin_disabled"), params)]
    place_rows(ctx, rows, now)
    return sorted({r.visit_type for r in rows})


def visit_types_of(conn: DictConnection, url: str) -> list[str]:
    """The visit types ``url`` has stats for."""
    return [
        str(r["visit_type"]) for r in conn.execute(query("visit_types_of_origin"), {"url": url})
    ]


def send_visits(
    conn: DictConnection, urls: list[str], visit_type: str | None, priority: int
) -> list[tuple[str, str, int]]:
    """Ask for a one-shot visit of each URL (of ``visit_type``, or of every visit
    type it is known with), all or none; return (url, visit type, request id)."""
    wanted: list[RequestVisit] = []
    for url in urls:
        types = [visit_type] if visit_type is not None else visit_types_of(conn, url)
        if not types:
            raise RequestError(f"URL: {url!r} is not a known origin; give --visit-type")
        wanted += [
            RequestVisit(url=url, visit_type=vt, priority=priority, kind="operator") for vt in types
        ]
    with conn.transaction():
        return [(r.url, r.visit_type, create_request(conn, r)) for r in wanted]
