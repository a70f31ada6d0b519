"""origin_visit_stats in PostgreSQL: locked reads and set-based writes of a batch.

Every statement takes whole arrays (``unnest``), so a batch of any size costs
three round trips: lock and read, write the refolded rows, advance
``last_visit`` of the rest.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row

from app.db.connection import DictConnection
from app.db.history_codec import decode_history, encode_history
from app.db.listings import mirror_row
from app.db.queries import query
from app.domain.placement import MirrorRow
from app.domain.visit_history import Tally, VisitHistory
from app.domain.visit_stats import OriginStats

StatsKey = tuple[str, str]


def lock_stats(
    conn: DictConnection, keys: list[StatsKey], wanted: set[StatsKey]
) -> dict[StatsKey, OriginStats]:
    """Lock the rows of ``keys`` (url, visit_type) in a fixed order; read those in ``wanted``.

    Absent rows are missing from the result. ``keys`` must be sorted.
    """
    params = {
        "urls": [k[0] for k in keys],
        "visit_types": [k[1] for k in keys],
        "wanted": [k in wanted for k in keys],
    }
    found: dict[StatsKey, OriginStats] = {}
    with conn.cursor(row_factory=tuple_row) as cur:
        for row in cur.execute(query("lock_stats"), params):
            stats = _stats_from_row(row)
            found[(stats.url, stats.visit_type)] = stats
    return found


def _stats_from_row(row: tuple[Any, ...]) -> OriginStats:
    url, visit_type, last_visit, target, anchor, disabled, history = row[:7]
    tally = Tally(*row[7:])
    # A row written before visit histories existed (or never visited): what it
    # says is the fold of everything older.
    visits = VisitHistory(base=tally) if history is None else decode_history(bytes(history))
    return OriginStats(url, visit_type, tally, visits, last_visit, target, anchor, disabled)


def queue_positions(conn: DictConnection) -> dict[str, datetime]:
    """The scheduler's queue position of each visit type that has one."""
    return {str(r["visit_type"]): r["position"] for r in conn.execute(query("queue_positions"))}  # type: ignore[misc]


def write_stats(conn: DictConnection, batch: list[OriginStats]) -> list[MirrorRow]:
    """Upsert ``batch`` in one statement; return the mirror rows of the written origins."""
    if not batch:
        return []
    tallies = [s.tally for s in batch]
    params: dict[str, list[Any]] = {
        "url": [s.url for s in batch],
        "visit_type": [s.visit_type for s in batch],
        "last_visit": [s.last_visit for s in batch],
        "next_visit_queue_position": [s.next_visit_queue_position for s in batch],
        "next_visit_anchor": [s.next_visit_anchor for s in batch],
        "disabled_for_failures": [s.disabled_for_failures for s in batch],
        "visit_history": [encode_history(s.history) for s in batch],
    }
    for name in Tally.__dataclass_fields__:
        params[name] = [getattr(t, name) for t in tallies]
    return [mirror_row(r) for r in conn.execute(query("upsert_stats"), params)]


def advance_last_visit(conn: DictConnection, last_visits: dict[StatsKey, datetime]) -> None:
    """Move ``last_visit`` forward (never back) for origins with only non-final statuses."""
    if not last_visits:
        return
    keys = sorted(last_visits)
    conn.execute(
        query("advance_last_visit"),
        {
            "url": [k[0] for k in keys],
            "visit_type": [k[1] for k in keys],
            "last_visit": [last_visits[k] for k in keys],
        },
    )
