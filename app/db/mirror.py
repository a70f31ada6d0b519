"""What the Redis mirror is built and checked from, read from PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from psycopg.rows import tuple_row

from app.db.connection import DictConnection
from app.db.listings import MIRROR_COLUMNS, mirror_row
from app.db.queries import query
from app.db.rows import column_index
from app.domain.placement import MirrorRow

#: Rows per fetch of a rebuild's server-side cursor.
FETCH_ROWS = 20_000


def mirror_row_batches(conn: DictConnection, visit_type: str) -> Iterator[list[tuple[Any, ...]]]:
    """Every origin of ``visit_type`` as mirror rows, in batches of MirrorRow field tuples."""
    with conn.cursor(name="mirror_rows", row_factory=tuple_row) as cursor:
        cursor.execute(query("mirror_rows_for_visit_type"), {"visit_type": visit_type})
        # Tuples straight into MirrorRow (the query selects exactly its fields,
        # in order, checked here), not a dict per row.
        names = list(column_index(cursor))
        if names != MIRROR_COLUMNS:
            raise ValueError(f"mirror rows come as {names}, not {MIRROR_COLUMNS}")
        # A list per fetch: psycopg's row-by-row generator costs more.
        while rows := cursor.fetchmany(FETCH_ROWS):
            yield rows


def mirror_rows_of_ids(conn: DictConnection, visit_type: str, ids: list[int]) -> list[MirrorRow]:
    """The mirror rows of the origins ``ids`` of ``visit_type`` that still exist."""
    params = {"visit_type": visit_type, "ids": ids}
    return [mirror_row(r) for r in conn.execute(query("mirror_rows_of_ids"), params)]


def unstarted_ids(
    conn: DictConnection, visit_type: str, among: list[int] | None = None
) -> set[int]:
    """The origins of ``visit_type`` (of ``among``, when given) sent to a worker
    whose visit never started (no ``created`` status since they were sent)."""
    if among is None:
        rows = conn.execute(query("unstarted_visits"), {"visit_type": visit_type}).fetchall()
    else:
        params = {"visit_type": visit_type, "ids": among}
        rows = conn.execute(query("unstarted_visits_of_ids"), params).fetchall()
    return {int(r["id"]) for r in rows}


def urls_of(conn: DictConnection, ids: list[int]) -> dict[int, str]:
    """The URL of each of these origin stats ids (unknown ones are left out)."""
    rows = conn.execute(query("urls_of_stats_ids"), {"ids": ids}).fetchall()
    return {int(r["id"]): str(r["url"]) for r in rows}
