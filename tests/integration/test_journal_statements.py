"""The journal's set-based statements keep every key and date exactly.

The keys and dates of a batch reach PostgreSQL as JSON text
(``app.db.rows.json_array``); a journal origin may hold any character but NUL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import psycopg
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from app.db.connection import Connections, DictConnection, connect
from app.db.stats import advance_last_visit, lock_stats
from app.settings import Settings

ODD_URLS = [
    "https://x.example/plain.git",
    'https://x.example/a\nb"c\\d\x01e\u00e9\u2028f.git',
    "https://x.example/\U0001f600 \t/[x].git",
]


def test_last_visit_moves_forward_for_any_url_to_the_microsecond(conn: DictConnection) -> None:
    when = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    odd_offset = timezone(timedelta(hours=1, seconds=30))
    dates = {
        (ODD_URLS[0], "git"): when,
        (ODD_URLS[1], "git"): when.astimezone(odd_offset),
        (ODD_URLS[2], "hg"): when + timedelta(microseconds=1),
    }
    advance_last_visit(conn, dates)
    advance_last_visit(conn, {key: date - timedelta(days=1) for key, date in dates.items()})
    rows = conn.execute("select url, visit_type, last_visit from origin_visit_stats").fetchall()
    assert {(r["url"], r["visit_type"]): r["last_visit"] for r in rows} == dates


def test_locked_rows_are_read_back_under_their_own_key(conn: DictConnection) -> None:
    when = datetime(2026, 3, 4, tzinfo=UTC)
    keys = sorted((url, "git") for url in ODD_URLS)
    advance_last_visit(conn, {key: when for key in keys[1:]})
    with conn.transaction():
        found = lock_stats(conn, keys)
    assert sorted(found) == keys[1:]
    assert all(found[key].last_visit == when for key in keys[1:])


def test_a_journal_connection_reads_timestamps_in_utc_whatever_the_server_zone(
    settings: Settings, conn: DictConnection
) -> None:
    database = conn.execute("select current_database() as d").fetchone()
    assert database is not None
    conn.execute(f"alter database \"{database['d']}\" set timezone to 'Europe/Paris'")
    with psycopg.connect(settings.database_dsn()) as plain:
        assert plain.execute("show timezone").fetchone() == ("Europe/Paris",)
    connections = Connections(settings, 1)
    try:
        journal = connections.run(lambda c: c, wait=lambda delay_s: True)
        zone = journal.execute("show timezone").fetchone()
        read = journal.execute("select '2026-03-04 05:06:07+00'::timestamptz as t").fetchone()
    finally:
        connections.close()
    assert zone == {"TimeZone": "UTC"}
    assert read is not None and read["t"] == datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert read["t"].tzinfo is UTC


def test_every_connection_reads_timestamps_in_utc_and_keeps_the_options_given(
    settings: Settings,
) -> None:
    dsn = make_conninfo(settings.database_dsn(), options="-c statement_timeout=4321")
    given = settings.model_copy(update={"database_url": SecretStr(dsn)})
    with connect(given) as conn:
        zone = conn.execute("show timezone").fetchone()
        timeout = conn.execute("show statement_timeout").fetchone()
        read = conn.execute("select '2026-03-04 05:06:07+01'::timestamptz as t").fetchone()
    assert zone == {"TimeZone": "UTC"}
    assert timeout == {"statement_timeout": "4321ms"}
    assert read is not None and read["t"] == datetime(2026, 3, 4, 4, 6, 7, tzinfo=UTC)
    assert read["t"].tzinfo is UTC
