"""A scheduling step and a journal batch that lock shared rows in opposite orders."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from app.db.connection import DictConnection, connect
from app.db.stats import lock_stats
from app.services.context import Context
from app.services.scheduling import schedule_step
from app.settings import Settings
from tests.integration.helpers import list_origins

NOW = datetime(2026, 11, 1, tzinfo=UTC)
A, B = "https://x.example/a.git", "https://x.example/b.git"


def _waiting_on_a_lock(conn: DictConnection, pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = conn.execute(
            "select wait_event_type from pg_stat_activity where pid = %s", (pid,)
        ).fetchone()
        if row is not None and row["wait_event_type"] == "Lock":
            return True
        time.sleep(0.02)
    return False


def test_a_step_that_deadlocks_with_a_journal_batch_still_stamps_and_sends_its_picks(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    # Listed b first: the later id has the earlier url, so the step (by id)
    # and the journal (by key) lock the two rows in opposite orders.
    list_origins(conn, ctx, [B], now=NOW)
    list_origins(conn, ctx, [A], now=NOW)
    journal = connect(settings, autocommit=False)
    scheduler = connect(settings)
    outcome: dict[str, Any] = {}

    def schedule() -> None:
        try:
            outcome["step"] = schedule_step(scheduler, ctx, "git", 10, NOW)
        except Exception as exc:
            outcome["error"] = exc

    try:
        lock_stats(journal, [(A, "git")])  # the journal's batch locks a...
        thread = threading.Thread(target=schedule)
        thread.start()
        assert _waiting_on_a_lock(conn, scheduler.info.backend_pid)
        lock_stats(journal, [(B, "git")])  # ...then b, held by the waiting step
        journal.commit()
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        journal.close()
        scheduler.close()
    assert "error" not in outcome, outcome.get("error")
    assert sorted(o.url for o in outcome["step"].orders) == [A, B]
    stamped = conn.execute(
        "select count(*) as n from origin_visit_stats where last_scheduled = %s", (NOW,)
    ).fetchone()
    assert stamped is not None and stamped["n"] == 2
