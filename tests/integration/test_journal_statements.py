"""The journal's set-based statements keep every key and date exactly.

The keys and dates of a batch reach PostgreSQL as JSON text
(``app.db.rows.json_array``); a journal origin may hold any character but NUL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from app.db.connection import DictConnection, connect, in_utc
from app.db.live import RetryingConnections
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
    settings: Settings,
) -> None:
    connections = RetryingConnections(settings, 1, wait=lambda delay_s: True)
    try:
        conn = connections.run(lambda c: c)
        assert conn.execute("show timezone").fetchone() == {"TimeZone": "UTC"}
        conn.execute("set time zone 'Europe/Paris'")
        local = conn.execute("select '2026-03-04 05:06:07+00'::timestamptz as t").fetchone()
        in_utc(conn)
        read = conn.execute("select '2026-03-04 05:06:07+00'::timestamptz as t").fetchone()
    finally:
        connections.close()
    assert local is not None and read is not None
    assert local["t"].utcoffset() == timedelta(hours=1)
    assert read["t"] == local["t"] == datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
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
