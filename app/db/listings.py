"""Listers and listed origins in PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

import psycopg
from msgspec.structs import fields
from psycopg.rows import tuple_row

from app.db.connection import DictConnection
from app.db.queries import query
from app.db.rows import column_index
from app.domain.placement import MirrorRow
from app.inputs.listing import ListedOriginIn


class UnknownLister(LookupError):
    """No lister instance of that name is registered."""


def register_lister(
    conn: DictConnection, name: str, instance_name: str, first_visits_queue_prefix: str | None
) -> uuid.UUID:
    """Create the lister instance if new; return its id."""
    row = conn.execute(
        query("register_lister"),
        {
            "name": name,
            "instance_name": instance_name,
            "first_visits_queue_prefix": first_visits_queue_prefix,
        },
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row["id"]))


def find_lister(conn: DictConnection, name: str, instance_name: str) -> dict[str, Any]:
    """The lister instance, or UnknownLister naming what was asked."""
    row = conn.execute(
        query("find_lister"), {"name": name, "instance_name": instance_name}
    ).fetchone()
    if row is None:
        raise UnknownLister(f"lister {name}/{instance_name} is not registered")
    return row


def known_visit_types(conn: DictConnection) -> set[str]:
    """Names of the configured visit types."""
    return {str(r["name"]) for r in conn.execute(query("known_visit_types"))}


def first_visits_prefixes(conn: DictConnection) -> list[str]:
    """The prefixes of the listers' first-visits queues."""
    return [str(r["prefix"]) for r in conn.execute(query("first_visits_prefixes"))]


#: The columns of a mirror row, as the queries name them (in the order of its fields).
MIRROR_COLUMNS = [f.name for f in fields(MirrorRow)]
_MIRROR_VALUES = itemgetter(*MIRROR_COLUMNS)


def mirror_row(r: dict[str, Any]) -> MirrorRow:
    """A MirrorRow from a query row with the mirror columns (``{{mirror_columns}}``).

    Positional, cheaper than by keyword, on a path that builds one per origin
    of every scheduling step, journal batch and rebuild.
    """
    return MirrorRow(*_MIRROR_VALUES(r))


#: The staging table of a listing (``create_listing_staging``): column -> type.
LISTING_STAGING = {
    "url": "text",
    "visit_type": "text",
    "extra_loader_arguments": "jsonb",
    "last_update": "timestamptz",
    "is_fork": "bool",
    "forked_from_url": "text",
    "enabled": "bool",
}


def listing_row(row: ListedOriginIn) -> tuple[Any, ...]:
    """The COPY row of one listed origin, in LISTING_STAGING's order (a test copies
    it and reads each column back by name)."""
    arguments = row.extra_loader_arguments
    return (
        row.url,
        row.visit_type,
        json.dumps(arguments) if arguments else "{}",
        row.last_update,
        row.is_fork,
        row.forked_from_url,
        row.enabled,
    )


def upsert_listed_origins(
    conn: DictConnection,
    lister_id: uuid.UUID,
    rows: Sequence[ListedOriginIn],
    now: datetime,
    update_last_seen: bool = True,
) -> list[tuple[MirrorRow, bool]]:
    """Record a batch of listed origins (COPY, then per table a plain insert of the new
    ones and an upsert of the others, upsert_listed_origins says why) inside the
    caller's transaction; return the mirror rows whose place may have changed,
    each with whether it is new. ``update_last_seen`` False keeps the
    ``last_seen`` of origins already listed (new ones are seen ``now``)."""
    # Sorting and grouping a 100k-row batch spills to disk with the default 4MB.
    conn.execute("set local work_mem = '64MB'")
    conn.execute(query("create_listing_staging"))
    with conn.cursor().copy(query("copy_listing_staging")) as copy:
        for row in rows:
            copy.write_row(listing_row(row))
    params = {"lister_id": lister_id, "now": now, "update_last_seen": update_last_seen}
    try:
        with conn.transaction():
            return _upsert(conn, {**params, "plain_inserts": True})
    except psycopg.errors.UniqueViolation:
        # Another writer inserted one of these origins after the statements'
        # snapshot: every row by the upsert, which waits for it and updates it.
        return _upsert(conn, {**params, "plain_inserts": False})


def _upsert(conn: DictConnection, params: dict[str, Any]) -> list[tuple[MirrorRow, bool]]:
    conn.execute(query("upsert_listed_origins"), params)
    with conn.cursor(row_factory=tuple_row, binary=True) as cursor:
        cursor.execute(query("upsert_stats_for_listing"), params)
        # Tuples, not dicts, fetched at once and read by position, in binary
        # (no dates formatted by the server and parsed here): this returns a
        # row per new origin of a bulk listing.
        names = list(column_index(cursor))
        if names != [*MIRROR_COLUMNS, "inserted"]:
            raise ValueError(f"upsert_stats_for_listing returns {names}")
        width = len(MIRROR_COLUMNS)
        return [(MirrorRow(*r[:width]), r[width]) for r in cursor.fetchall()]


def start_listing(conn: DictConnection, lister_id: uuid.UUID, started: datetime) -> None:
    """Note when a (full) listing started."""
    conn.execute(query("start_listing"), {"lister_id": lister_id, "started": started})


def count_unseen(conn: DictConnection, lister_id: uuid.UUID, started: datetime) -> tuple[int, int]:
    """(origins a full listing started at ``started`` would disable, enabled origins)."""
    row = conn.execute(
        query("count_unseen"), {"lister_id": lister_id, "started": started}
    ).fetchone()
    assert row is not None
    return int(row["unseen"]), int(row["enabled"])


def disable_unseen(
    conn: DictConnection, lister_id: uuid.UUID, started: datetime, finished: datetime
) -> list[MirrorRow]:
    """End a full listing: disable the lister's origins not seen since ``started``;
    return the mirror rows of the origins that changed."""
    params = {"lister_id": lister_id, "started": started, "finished": finished}
    rows = [mirror_row(r) for r in conn.execute(query("disable_unseen"), params)]
    conn.execute(query("finish_listing"), params)
    return rows


def finish_listing(conn: DictConnection, lister_id: uuid.UUID, finished: datetime) -> None:
    """End an incremental listing."""
    conn.execute(query("finish_listing"), {"lister_id": lister_id, "finished": finished})
