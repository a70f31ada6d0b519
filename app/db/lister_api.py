"""The lister interface's reads and writes (``app.listers.interface``) in PostgreSQL."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db.connection import DictConnection
from app.db.queries import query


def listers(conn: DictConnection, *, only_first_visits_to_schedule: bool) -> list[dict[str, Any]]:
    """Every lister instance, or those whose first visits are still to schedule."""
    params = {"only_first_visits_to_schedule": only_first_visits_to_schedule}
    return conn.execute(query("listers_all"), params).fetchall()


def listers_by_id(conn: DictConnection, ids: list[UUID]) -> list[dict[str, Any]]:
    """The lister instances of these ids (unknown ones are left out)."""
    return conn.execute(query("listers_by_id"), {"ids": ids}).fetchall()


def lister_by_name(conn: DictConnection, name: str, instance_name: str) -> dict[str, Any] | None:
    """The lister instance, or None if it is not registered."""
    params = {"name": name, "instance_name": instance_name}
    return conn.execute(query("lister_by_name"), params).fetchone()


def get_or_create_lister(
    conn: DictConnection, name: str, instance_name: str, first_visits_queue_prefix: str | None
) -> dict[str, Any]:
    """The lister instance, registered first if new (an existing one is unchanged)."""
    params = {
        "name": name,
        "instance_name": instance_name,
        "first_visits_queue_prefix": first_visits_queue_prefix,
    }
    row = conn.execute(query("lister_get_or_create"), params).fetchone()
    assert row is not None  # the insert or the select returns the row
    return row


def update_lister(conn: DictConnection, lister: dict[str, Any]) -> dict[str, Any] | None:
    """Write a lister's state; None when its ``updated`` is not the stored one."""
    params = {**lister, "current_state": Jsonb(lister["current_state"])}
    return conn.execute(query("lister_update"), params).fetchone()


def known_listers(conn: DictConnection, ids: list[UUID]) -> set[UUID]:
    """Which of these lister ids are registered."""
    return {r["id"] for r in conn.execute(query("listers_known"), {"ids": ids})}


def recorded_origins(conn: DictConnection, lister_id: UUID) -> list[dict[str, Any]]:
    """The origins just recorded for a lister, as stored."""
    return conn.execute(query("listed_origins_recorded"), {"lister_id": lister_id}).fetchall()


#: Bytes a listed origin weighs beyond its URL and arguments, in memory and
#: encoded (lister id, visit type, dates, flags).
ROW_OVERHEAD_BYTES = 200


def listed_origins_page(
    conn: DictConnection, params: dict[str, Any], max_bytes: int
) -> tuple[list[dict[str, Any]], bool]:
    """One page of listed origins in (lister_id, url, visit_type) order, read in
    chunks and ended early once about ``max_bytes`` are read; with whether it was."""
    rows: list[dict[str, Any]] = []
    total = 0
    with conn.transaction(), conn.cursor(name="listed_origins_page") as cursor:
        cursor.execute(query("listed_origins_page"), params)
        while chunk := cursor.fetchmany(1000):
            for row in chunk:
                total += int(row.pop("size")) + ROW_OVERHEAD_BYTES
                rows.append(row)
                if total >= max_bytes and len(rows) < params["limit"]:
                    return rows, True
    return rows, False


def last_visit_type(conn: DictConnection, lister_id: UUID, url: str) -> str:
    """The last visit type a lister listed ``url`` with ("" if none)."""
    row = conn.execute(
        query("listed_origin_last_visit_type"), {"lister_id": lister_id, "url": url}
    ).fetchone()
    return str(row["visit_type"]) if row and row["visit_type"] is not None else ""


def lister_visit_types(conn: DictConnection, lister_id: UUID) -> list[str]:
    """The visit types of the origins a lister has listed."""
    rows = conn.execute(query("lister_visit_types"), {"lister_id": lister_id})
    return [str(r["visit_type"]) for r in rows]


def visit_stats(conn: DictConnection, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The visit stats rows of these (url, visit_type) pairs."""
    params = {"urls": [p[0] for p in pairs], "visit_types": [p[1] for p in pairs]}
    return conn.execute(query("visit_stats_get"), params).fetchall()


def queue_positions(conn: DictConnection) -> dict[str, int]:
    """The recurrent scheduler's queue position per visit type, in Unix seconds."""
    rows = conn.execute(query("lister_api_queue_positions"))
    return {str(r["visit_type"]): int(r["position"].timestamp()) for r in rows}
