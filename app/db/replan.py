"""origin_visit_stats for the re-planning sweep: a slice of rows, and their new targets."""

from __future__ import annotations

from datetime import datetime

from psycopg.rows import tuple_row

from app.db.connection import DictConnection
from app.db.listings import mirror_row
from app.db.queries import query
from app.db.rows import column_index
from app.db.stats import stats_reader
from app.domain.placement import MirrorRow
from app.domain.visit_stats import OriginStats


def stats_after(
    conn: DictConnection, visit_type: str, after_id: int, limit: int
) -> list[tuple[int, OriginStats]]:
    """Up to ``limit`` rows of ``visit_type`` with an id above ``after_id``, by id."""
    params = {"visit_type": visit_type, "after": after_id, "limit": limit}
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("stats_after_id"), params, binary=True)
        at = column_index(cur)
        read = stats_reader(at)
        return [(int(row[at["id"]]), read(row)) for row in cur]


#: A re-planned origin: (id, new target, the last final date it was planned
#: from, the new delay after a reported change).
PlannedTarget = tuple[int, datetime, datetime | None, float | None]


def set_planned_targets(conn: DictConnection, targets: list[PlannedTarget]) -> list[MirrorRow]:
    """Write re-planned targets and delays; rows whose last final date moved
    meanwhile are left to the journal. Returns the mirror rows of the origins
    moved."""
    if not targets:
        return []
    params = {
        "ids": [t[0] for t in targets],
        "targets": [t[1] for t in targets],
        "finals": [t[2] for t in targets],
        "delays": [t[3] for t in targets],
    }
    return [mirror_row(r) for r in conn.execute(query("set_planned_targets"), params)]
