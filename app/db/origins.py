"""Single origins as operators see and control them, in PostgreSQL."""

from __future__ import annotations

from typing import Any

from app.db.connection import DictConnection
from app.db.listings import mirror_row
from app.db.queries import query
from app.domain.placement import MirrorRow


def describe(conn: DictConnection, url: str, visit_type: str | None) -> list[dict[str, Any]]:
    """Stats and listing of ``url``, one row per visit type (or only ``visit_type``)."""
    params = {"url": url, "visit_type": visit_type}
    return conn.execute(query("describe_origin"), params).fetchall()


def set_disabled(
    conn: DictConnection, url: str, visit_type: str | None, *, disabled: bool
) -> list[MirrorRow]:
    """Disable (or enable) ``url`` for one or every visit type; the changed rows."""
    params = {"url": url, "visit_type": visit_type, "disabled": disabled}
    with conn.transaction():
        return [mirror_row(r) for r in conn.execute(query("set_origin_disabled"), params)]


def visit_types_of(conn: DictConnection, url: str) -> list[str]:
    """The visit types ``url`` has stats for."""
    rows = conn.execute(query("visit_types_of_origin"), {"url": url})
    return [str(r["visit_type"]) for r in rows]


def demo_summary(conn: DictConnection) -> dict[str, Any]:
    """What the demo has done so far: origins, visits by outcome, lister runs."""
    return conn.execute(query("demo_summary")).fetchone() or {}


def recently_visited(conn: DictConnection, since: Any) -> list[dict[str, Any]]:
    """The origins visited since ``since``, newest first."""
    return conn.execute(query("demo_recent_visits"), {"since": since}).fetchall()
