"""origin_visit_stats in PostgreSQL: locked reads and set-based writes of a batch.

Every statement takes whole arrays (``unnest``), so a batch of any size costs
three round trips: advance ``last_visit`` of origins without a final status,
then lock and read the others, and write them refolded.
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


def lock_stats(conn: DictConnection, keys: list[StatsKey]) -> dict[StatsKey, OriginStats]:
    """Lock and read the rows of ``keys`` (url, visit_type), which must be sorted.

    Absent rows are missing from the result.
    """
    params = {"urls": [k[0] for k in keys], "visit_types": [k[1] for k in keys]}
    found: dict[StatsKey, OriginStats] = {}
    with conn.cursor(row_factory=tuple_row) as cur:
        for row in cur.execute(query("lock_stats"), params, binary=True):
            stats = stats_from_row(row)
            found[(stats.url, stats.visit_type)] = stats
    return found


def stats_from_row(row: tuple[Any, ...]) -> OriginStats:
    url, visit_type, last_visit, target, anchor, disabled, history, reports = row[:8]
    tally = Tally(*row[8:])
    # A row written before visit histories existed (or never visited): what it
    # says is the fold of everything older.
    visits = VisitHistory(base=tally) if history is None else decode_history(bytes(history))
    return OriginStats(
        url, visit_type, tally, visits, last_visit, target, anchor, disabled, bool(reports)
    )


def queue_positions(conn: DictConnection) -> dict[str, datetime]:
    """The scheduler's queue position of each visit type that has one."""
    return {str(r["visit_type"]): r["position"] for r in conn.execute(query("queue_positions"))}


_STAGING_TYPES = [
    "text", "text", "timestamptz", "timestamptz", "text", "bytea", "timestamptz", "int4",
    "int4", "int8", "timestamptz", "int4", "int4", "int4", "int4", "float8", "bool",
    "timestamptz", "timestamptz", "bytea", "float8",
]  # fmt: skip


def write_stats(conn: DictConnection, batch: list[OriginStats]) -> list[MirrorRow]:
    """Upsert ``batch`` (COPY to a staging table, then one statement); return the
    mirror rows of the written origins."""
    if not batch:
        return []
    with conn.cursor() as cur:
        cur.execute(query("create_stats_staging"))
        with cur.copy(query("copy_stats_staging")) as copy:
            copy.set_types(_STAGING_TYPES)
            for s in batch:
                t = s.tally
                copy.write_row(
                    (
                        s.url,
                        s.visit_type,
                        t.last_successful,
                        s.last_visit,
                        t.last_visit_status,
                        t.last_snapshot,
                        s.next_visit_queue_position,
                        t.next_position_offset,
                        t.successive_visits,
                        t.last_visit_number,
                        t.last_final_date,
                        t.eventful_visits,
                        t.uneventful_visits,
                        t.failed_visits,
                        t.failures_in_a_row,
                        t.last_duration_s,
                        s.disabled_for_failures,
                        t.last_eventful,
                        s.next_visit_anchor,
                        encode_history(s.history),
                        s.change_rate_per_day,
                    )
                )
        return [mirror_row(r) for r in cur.execute(query("upsert_stats"))]


def advance_last_visit(conn: DictConnection, last_visits: dict[StatsKey, datetime]) -> None:
    """Move ``last_visit`` forward (never back) for origins with only non-final statuses."""
    if not last_visits:
        return
    keys = sorted(last_visits)
    params = {
        "url": [k[0] for k in keys],
        "visit_type": [k[1] for k in keys],
        "last_visit": [last_visits[k] for k in keys],
    }
    with conn.cursor() as cur:
        cur.execute(query("advance_last_visit"), params, binary=True)
