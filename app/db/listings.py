"""Listers and listed origins in PostgreSQL."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.placement import MirrorRow
from app.listing_input import ListedOriginIn


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


def mirror_row(r: dict[str, Any]) -> MirrorRow:
    """A MirrorRow from a query row with the mirror columns."""
    return MirrorRow(
        id=r["id"],
        visit_type=r["visit_type"],
        next_visit_queue_position=r["next_visit_queue_position"],
        last_visit_status=r["last_visit_status"],
        last_final_date=r["last_final_date"],
        last_scheduled=r["last_scheduled"],
        last_successful=r["last_successful"],
        last_update=r["last_update"],
        never_succeeded=r["never_succeeded"],
        enabled=r["enabled"],
        version=r["version"],
    )


def upsert_listed_origins(
    conn: DictConnection, lister_id: uuid.UUID, rows: list[ListedOriginIn], now: datetime
) -> list[tuple[MirrorRow, bool]]:
    """Record a batch of listed origins (COPY then one upsert per table) inside the
    caller's transaction; return the mirror rows whose place may have changed,
    each with whether it is new."""
    # Sorting and grouping a 100k-row batch spills to disk with the default 4MB.
    conn.execute("set local work_mem = '64MB'")
    conn.execute(query("create_listing_staging"))
    with conn.cursor().copy(query("copy_listing_staging")) as copy:
        for row in rows:
            arguments = row.extra_loader_arguments
            copy.write_row(
                (
                    row.url,
                    row.visit_type,
                    json.dumps(arguments) if arguments else "{}",
                    row.last_update,
                    row.is_fork,
                    row.forked_from_url,
                )
            )
    params = {"lister_id": lister_id, "now": now}
    conn.execute(query("upsert_listed_origins"), params)
    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(query("upsert_stats_for_listing"), params)
        # Tuples, not dicts: this returns a row per new origin of a bulk listing.
        changed = [(MirrorRow(*r[:-1]), bool(r[-1])) for r in cursor]
    return changed


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
