"""origin_visit_stats in PostgreSQL: locked reads and set-based writes of a batch.

Every statement takes whole arrays (as JSON text, ``rows.json_array``), so a
batch of any size costs three round trips: advance ``last_visit`` of origins
without a final status, then lock and read the others, and write them
refolded.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from msgspec.structs import fields
from psycopg.rows import tuple_row

from app.db.connection import DictConnection
from app.db.history_codec import decode_history, encode_history
from app.db.listings import MIRROR_COLUMNS
from app.db.queries import query
from app.db.rows import column_index, json_array
from app.domain.placement import MirrorRow
from app.domain.visit_history import Tally, VisitHistory
from app.domain.visit_stats import OriginStats

StatsKey = tuple[str, str]


def lock_stats(conn: DictConnection, keys: list[StatsKey]) -> dict[StatsKey, OriginStats]:
    """Lock and read the rows of ``keys`` (url, visit_type), which must be sorted.

    Absent rows are missing from the result.
    """
    params = {
        "urls": json_array([k[0] for k in keys]),
        "visit_types": json_array([k[1] for k in keys]),
    }
    found: dict[StatsKey, OriginStats] = {}
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("lock_stats"), params, binary=True)
        read = stats_reader(column_index(cur))
        for row in cur.fetchall():  # loaded in C, where iterating costs a call per row
            stats = read(row)
            found[(stats.url, stats.visit_type)] = stats
    return found


#: The fields of a Tally that origin_visit_stats stores as columns (the change
#: observations live in the visit history only): the leading ones, so a Tally
#: is built from them by position.
_TALLY_COLUMNS = [f.name for f in fields(Tally) if not f.name.startswith("change_obs_")]


#: The other columns of OriginStats, read by name (its history decoded).
_STATS_COLUMNS = [
    "url", "visit_type", "visit_history", "last_visit", "next_visit_queue_position",
    "next_visit_anchor", "disabled_for_failures", "reports_last_update",
]  # fmt: skip


def stats_reader(at: dict[str, int]) -> Callable[[tuple[Any, ...]], OriginStats]:
    """The reader of OriginStats from the rows of one statement with the columns of
    ``lock_stats`` at ``at``, found once (a journal batch reads thousands)."""
    tally_values = itemgetter(*[at[name] for name in _TALLY_COLUMNS])
    other_values = itemgetter(*[at[name] for name in _STATS_COLUMNS])
    # read where the query selects it (the re-planning sweep compares it)
    delay_at = at.get("reported_change_delay_s")

    def read(row: tuple[Any, ...]) -> OriginStats:
        tally = Tally(*tally_values(row))
        url, visit_type, history, last_visit, position, anchor, disabled, reports = other_values(
            row
        )
        # A row written before visit histories existed (or never visited): what it
        # says is the fold of everything older.
        visits = VisitHistory(base=tally) if history is None else decode_history(bytes(history))
        return OriginStats(
            url,
            visit_type,
            tally,
            visits,
            last_visit,
            position,
            anchor,
            disabled,
            bool(reports),
            reported_change_delay_s=row[delay_at] if delay_at is not None else None,
        )

    return read


def queue_positions(conn: DictConnection) -> dict[str, datetime]:
    """The scheduler's queue position of each visit type that has one."""
    return {str(r["visit_type"]): r["position"] for r in conn.execute(query("queue_positions"))}


#: The staging table of a journal batch (``create_stats_staging``): column -> type.
STATS_STAGING = {
    "url": "text", "visit_type": "text", "last_successful": "timestamptz",
    "last_visit": "timestamptz", "last_visit_status": "text", "last_snapshot": "bytea",
    "next_visit_queue_position": "timestamptz", "next_position_offset": "int4",
    "successive_visits": "int4", "last_visit_number": "int8", "last_final_date": "timestamptz",
    "eventful_visits": "int4", "uneventful_visits": "int4", "failed_visits": "int4",
    "failures_in_a_row": "int4", "last_duration_s": "float8", "disabled_for_failures": "bool",
    "last_eventful": "timestamptz", "next_visit_anchor": "timestamptz",
    "visit_history": "bytea", "change_rate_per_day": "float8",
    "reported_change_delay_s": "float8",
}  # fmt: skip


def stats_row(s: OriginStats) -> tuple[Any, ...]:
    """The COPY row of one refolded origin, in STATS_STAGING's order, built as a
    tuple (a journal batch writes thousands)."""
    t = s.tally
    return (
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
        s.reported_change_delay_s,
    )


def write_stats(conn: DictConnection, batch: list[OriginStats]) -> list[MirrorRow]:
    """Upsert ``batch`` (COPY to a staging table, then one statement); return the
    mirror rows of the written origins."""
    if not batch:
        return []
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("create_stats_staging"))
        with cur.copy(query("copy_stats_staging")) as copy:
            copy.set_types(list(STATS_STAGING.values()))
            for stats in batch:
                copy.write_row(stats_row(stats))
        cur.execute(query("upsert_stats"))
        at = column_index(cur)
        values = itemgetter(*[at[name] for name in MIRROR_COLUMNS])
        return [MirrorRow(*values(row)) for row in cur.fetchall()]


def advance_last_visit(conn: DictConnection, last_visits: dict[StatsKey, datetime]) -> None:
    """Move ``last_visit`` forward (never back) for origins with only non-final statuses."""
    if not last_visits:
        return
    keys = sorted(last_visits)
    params = {
        "url": json_array([k[0] for k in keys]),
        "visit_type": json_array([k[1] for k in keys]),
        # In UTC: RFC 3339 offsets have no seconds, which msgspec would drop.
        "last_visit": json_array([last_visits[k].astimezone(UTC) for k in keys]),
    }
    with conn.cursor() as cur:
        cur.execute(query("advance_last_visit"), params, binary=True)
