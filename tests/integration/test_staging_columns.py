"""The COPY paths agree with their staging tables, by column name and type.

A journal batch and a listing are COPYed into a temporary staging table; the
Python side names each column once (``STATS_STAGING``, ``LISTING_STAGING``);
the journal builds each row by name, a listing row is built by position and
copied here, then read back column by column. A column added to one of the
three places (the table, the COPY statement, the row) and not the others, or
two columns swapped, fails here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from msgspec.structs import fields

from app.db.connection import DictConnection
from app.db.history_codec import encode_history
from app.db.listings import LISTING_STAGING, listing_row
from app.db.queries import query
from app.db.stats import STATS_STAGING, stats_reader, stats_row
from app.domain.visit_history import FinalVisit, Tally, VisitHistory
from app.domain.visit_stats import OriginStats
from app.inputs.listing import ListedOriginIn

STAGINGS = [
    ("create_stats_staging", "copy_stats_staging", "journal_stats_staging", STATS_STAGING),
    ("create_listing_staging", "copy_listing_staging", "listing_staging", LISTING_STAGING),
]


def table_columns(conn: DictConnection, table: str) -> dict[str, str]:
    rows = conn.execute(
        "select a.attname, t.typname from pg_attribute a join pg_type t on t.oid = a.atttypid"
        " where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped"
        " and a.attidentity = ''"  # an identity column numbers the rows; nothing copies it
        " order by a.attnum",
        (table,),
    ).fetchall()
    return {r["attname"]: r["typname"] for r in rows}


def copy_columns(statement: str) -> list[str]:
    match = re.search(r"copy\s+\w+\s*\(([^)]*)\)", statement)
    assert match, statement
    return [c.strip() for c in match.group(1).split(",")]


def stats_values(s: OriginStats) -> dict[str, Any]:
    """The staging columns of one refolded origin by name: what ``stats_row``
    must give in STATS_STAGING's order."""
    t = s.tally
    return {
        "url": s.url,
        "visit_type": s.visit_type,
        "last_successful": t.last_successful,
        "last_visit": s.last_visit,
        "last_visit_status": t.last_visit_status,
        "last_snapshot": t.last_snapshot,
        "next_visit_queue_position": s.next_visit_queue_position,
        "next_position_offset": t.next_position_offset,
        "successive_visits": t.successive_visits,
        "last_visit_number": t.last_visit_number,
        "last_final_date": t.last_final_date,
        "eventful_visits": t.eventful_visits,
        "uneventful_visits": t.uneventful_visits,
        "failed_visits": t.failed_visits,
        "failures_in_a_row": t.failures_in_a_row,
        "last_duration_s": t.last_duration_s,
        "disabled_for_failures": s.disabled_for_failures,
        "last_eventful": t.last_eventful,
        "next_visit_anchor": s.next_visit_anchor,
        "visit_history": encode_history(s.history),
        "change_rate_per_day": s.change_rate_per_day,
        "reported_change_delay_s": s.reported_change_delay_s,
    }


@pytest.mark.parametrize(("create", "copy", "table", "columns"), STAGINGS)
def test_the_staging_table_and_the_copy_statement_name_the_same_columns_in_order(
    conn: DictConnection, create: str, copy: str, table: str, columns: dict[str, str]
) -> None:
    with conn.transaction():
        conn.execute(query(create))
        assert table_columns(conn, table) == columns
        assert copy_columns(query(copy)) == list(columns)


def test_the_rows_written_name_every_staging_column() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    stats = OriginStats("https://x.example/a", "git", last_visit=now)
    assert list(stats_values(stats)) == list(STATS_STAGING)


@pytest.mark.parametrize(
    "listed",
    [
        ListedOriginIn(url="https://x.example/a", visit_type="git"),
        ListedOriginIn(
            url="https://x.example/b",
            visit_type="hg",
            extra_loader_arguments={"branch": "main"},
            last_update=datetime(2026, 1, 1, tzinfo=UTC),
            is_fork=True,
            forked_from_url="https://x.example/a",
            enabled=False,
        ),
    ],
)
def test_the_listing_copy_row_lands_in_each_staging_column_by_name(
    conn: DictConnection, listed: ListedOriginIn
) -> None:
    with conn.transaction(force_rollback=True):
        conn.execute(query("create_listing_staging"))
        with conn.cursor().copy(query("copy_listing_staging")) as copy:
            copy.write_row(listing_row(listed))
        row = conn.execute("select * from listing_staging").fetchone()
    assert row is not None and row.pop("seq") == 1  # numbered as sent
    assert row == {
        "url": listed.url,
        "visit_type": listed.visit_type,
        "extra_loader_arguments": listed.extra_loader_arguments,
        "last_update": listed.last_update,
        "is_fork": listed.is_fork,
        "forked_from_url": listed.forked_from_url,
        "enabled": listed.enabled,
    }


def test_the_journal_copy_row_holds_each_staging_column_by_name() -> None:
    d = [datetime(2026, 1, day, tzinfo=UTC) for day in range(1, 7)]
    snapshot = b"s" * 20
    tally = Tally(5, 2, 3, 4, 0, 6, "full", 7, d[0], d[1], d[2], snapshot, 12.5, 1.0, 2.0, 3.0, 4.0)
    visit = FinalVisit(7, d[0], "full", snapshot, 12.5)
    stats = OriginStats(
        "https://x.example/a", "git", tally, VisitHistory(Tally(), (visit,)), d[3], d[4], d[5],
        True, True, 0.25,
    )  # fmt: skip
    values = stats_values(stats)
    assert stats_row(stats) == tuple(values[name] for name in STATS_STAGING)


def test_a_stats_row_read_back_gives_its_tally_field_by_field() -> None:
    names = [f.name for f in fields(Tally) if not f.name.startswith("change_obs_")]
    row = (*range(len(names)), "https://x.example/a", "git", None, None, None, None, False, False)
    at = {name: i for i, name in enumerate(names)}
    extra = ["url", "visit_type", "visit_history", "last_visit", "next_visit_queue_position"]
    extra += ["next_visit_anchor", "disabled_for_failures", "reports_last_update"]
    at |= {name: len(names) + i for i, name in enumerate(extra)}
    tally = stats_reader(at)(row).tally
    assert [getattr(tally, name) for name in names] == list(range(len(names)))
