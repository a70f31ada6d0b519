"""Recording a lister's output: Postgres first, then the Redis mirror."""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime

from app.context import Context
from app.db.connection import DictConnection
from app.db.listings import known_visit_types, upsert_listed_origins
from app.domain.placement import Placement, place
from app.listing_input import NumberedRow, check_visit_types


def record_listed_origins(
    conn: DictConnection, ctx: Context, lister_id: uuid.UUID, rows: list[NumberedRow], now: datetime
) -> int:
    """Validate then record ``rows`` for a lister, all or nothing; return how many.

    An unknown visit type refuses the whole batch before anything is written.
    """
    check_visit_types(rows, known_visit_types(conn))
    with conn.transaction():
        mirror_rows = upsert_listed_origins(conn, lister_id, [r for _, r in rows], now)
    by_type: dict[str, list[Placement]] = defaultdict(list)
    for row in mirror_rows:
        by_type[row.visit_type].append(place(row, now, ctx.cooldowns))
    for visit_type, placements in by_type.items():
        ctx.mirror.place(visit_type, placements, keep_inflight=True)
    return len(rows)
