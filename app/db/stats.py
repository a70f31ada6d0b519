"""origin_visit_stats in PostgreSQL: locked reads and set-based writes of a batch."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime

from app.db.connection import DictConnection
from app.db.listings import mirror_row
from app.db.queries import query
from app.domain.placement import MirrorRow
from app.domain.visit_stats import OriginStats

StatsKey = tuple[str, str]
_COLUMNS = [f.name for f in fields(OriginStats)]


def lock_stats(conn: DictConnection, keys: list[StatsKey]) -> dict[StatsKey, OriginStats]:
    """Lock and read the stats of ``keys`` (url, visit_type); absent ones are missing."""
    params = {"urls": [k[0] for k in keys], "visit_types": [k[1] for k in keys]}
    found: dict[StatsKey, OriginStats] = {}
    for row in conn.execute(query("lock_stats"), params):
        stats = OriginStats(**row)
        found[(stats.url, stats.visit_type)] = stats
    return found


def queue_positions(conn: DictConnection) -> dict[str, datetime]:
    """The scheduler's queue position of each visit type that has one."""
    return {str(r["visit_type"]): r["position"] for r in conn.execute(query("queue_positions"))}


def write_stats(conn: DictConnection, batch: list[OriginStats]) -> list[MirrorRow]:
    """Upsert ``batch`` in one statement; return the mirror rows of the written origins."""
    if not batch:
        return []
    params = {name: [getattr(s, name) for s in batch] for name in _COLUMNS}
    return [mirror_row(r) for r in conn.execute(query("upsert_stats"), params)]
