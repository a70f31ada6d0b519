"""Recording a lister's output: Postgres first, then the Redis mirror.

A listing is either incremental (it reports some origins; nothing else
changes) or full (it reports every origin the forge has; when it finishes,
the lister's origins it did not report are disabled). A full listing may
arrive in many batches between ``start_listing`` and ``finish_listing``.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from app.context import Context
from app.db import listings as db
from app.db.connection import DictConnection
from app.domain.placement import MirrorRow, Placement, place
from app.listing_input import NumberedRow, check_visit_types


def record_listed_origins(
    conn: DictConnection, ctx: Context, lister_id: uuid.UUID, rows: list[NumberedRow], now: datetime
) -> int:
    """Validate then record one batch of ``rows`` for a lister, all or nothing.

    An unknown visit type refuses the whole batch before anything is written.
    Returns how many rows were recorded.
    """
    check_visit_types(rows, db.known_visit_types(conn))
    with conn.transaction():
        changed = db.upsert_listed_origins(conn, lister_id, [r for _, r in rows], now)
    new = [row for row, inserted in changed if inserted]
    moved = [row for row, inserted in changed if not inserted]
    for visit_type, placements in _by_type(new, ctx, now).items():
        ctx.mirror.add_new(visit_type, placements)
    for visit_type, placements in _by_type(moved, ctx, now).items():
        ctx.mirror.place(visit_type, placements, keep_inflight=True)
    return len(rows)


def start_listing(conn: DictConnection, lister_id: uuid.UUID, now: datetime) -> datetime:
    """Begin a listing; returns its start, to pass to ``finish_listing``."""
    db.start_listing(conn, lister_id, now)
    return now


def finish_listing(
    conn: DictConnection,
    ctx: Context,
    lister_id: uuid.UUID,
    started: datetime,
    now: datetime,
    *,
    full: bool,
) -> int:
    """End a listing. A full one disables the lister's origins it did not report
    since ``started``; returns how many origins were disabled."""
    if not full:
        db.finish_listing(conn, lister_id, now)
        return 0
    with conn.transaction():
        changed = db.disable_unseen(conn, lister_id, started, now)
    for visit_type, placements in _by_type(changed, ctx, now).items():
        ctx.mirror.place(visit_type, placements)
    return len(changed)


def _by_type(rows: Iterable[MirrorRow], ctx: Context, now: datetime) -> dict[str, list[Placement]]:
    by_type: dict[str, list[Placement]] = defaultdict(list)
    for row in rows:
        by_type[row.visit_type].append(place(row, now, ctx.cooldowns))
    return by_type
