"""A journal batch reads the rows it refolds without locking them: a row another
writer changes between that read and the batch's write is refolded from what
that writer left, never overwritten with a fold of the older row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import app.services.journal as journal
from app.db.connection import DictConnection, connect
from app.db.scheduling import visit_type_configs
from app.db.stats import StatsKey, advance_last_visit, read_stats
from app.domain.journal_event import VisitStatusEvent
from app.services.context import Context
from app.settings import Settings
from tests.integration.helpers import list_origins

NOW = datetime(2026, 11, 20, tzinfo=UTC)
URLS = ["https://race.example/a", "https://race.example/b"]


def row(conn: DictConnection, url: str) -> dict[str, object]:
    found = conn.execute(
        "select last_visit, last_visit_status::text as status, successive_visits, version"
        " from origin_visit_stats where url = %s and visit_type = 'git'",
        (url,),
    ).fetchone()
    assert found is not None
    return dict(found)


def test_a_row_advanced_by_another_client_after_the_read_is_refolded_not_overwritten(
    conn: DictConnection, ctx: Context, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    visit = NOW + timedelta(hours=1)
    later = NOW + timedelta(days=1)  # the next visit's created status, in another client
    before = {url: row(conn, url) for url in URLS}
    reads: list[bool] = []

    def read_then_race(c: DictConnection, keys: list[StatsKey], *, lock: bool = False):  # type: ignore[no-untyped-def]
        found = read_stats(c, keys, lock=lock)
        reads.append(lock)
        if not lock:  # another journal client commits between this read and the write
            with connect(settings) as other:
                advance_last_visit(other, {(URLS[0], "git"): later})
        return found

    monkeypatch.setattr(journal, "read_stats", read_then_race)
    events = [VisitStatusEvent(url, "git", 1, visit, "full", b"s" * 20, None) for url in URLS]
    outcome, mirror_rows = journal.write_batch(conn, ctx, events, visit_type_configs(conn), NOW)

    raced, quiet = row(conn, URLS[0]), row(conn, URLS[1])
    # the raced row keeps the other client's advance and has the batch's fold
    assert raced["last_visit"] == later
    assert raced["status"] == quiet["status"] == "full"
    assert raced["successive_visits"] == quiet["successive_visits"] == 1
    # one write by the other client, one by the batch; the batch refolded only it
    assert raced["version"] == before[URLS[0]]["version"] + 2  # type: ignore[operator]
    assert quiet["version"] == before[URLS[1]]["version"] + 1  # type: ignore[operator]
    assert reads == [False, True]
    assert len(outcome.written) == len(mirror_rows) == 2
    assert {r.version for r in mirror_rows} == {raced["version"], quiet["version"]}
