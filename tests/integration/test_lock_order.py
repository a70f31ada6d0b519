"""Writers of origin_visit_stats lock its rows in one order, so none deadlocks."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from app.db.connection import DictConnection, connect
from app.db.scheduling import mark_scheduled
from app.db.stats import lock_stats
from app.settings import Settings


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


def test_the_scheduler_and_the_journal_lock_shared_rows_in_one_order_and_never_deadlock(
    settings: Settings, conn: DictConnection
) -> None:
    # Ids and keys in opposite orders: the later id has the earlier url.
    conn.execute(
        "insert into origin_visit_stats (url, visit_type) values "
        "('https://x.example/b.git', 'git'), ('https://x.example/a.git', 'git')"
    )
    ids = {
        r["url"]: int(r["id"])
        for r in conn.execute("select id, url from origin_visit_stats").fetchall()
    }
    assert ids["https://x.example/b.git"] < ids["https://x.example/a.git"]
    journal = connect(settings, autocommit=False)
    scheduler = connect(settings)
    scheduler_pid = scheduler.info.backend_pid
    outcome: dict[str, Any] = {}

    def schedule() -> None:
        try:
            with scheduler.transaction():
                outcome["rows"] = mark_scheduled(scheduler, sorted(ids.values()), datetime.now(UTC))
        except Exception as exc:
            outcome["error"] = exc

    try:
        # The journal locks in key order (lock_stats takes sorted keys): a first...
        lock_stats(journal, [("https://x.example/a.git", "git")])
        thread = threading.Thread(target=schedule)
        thread.start()
        assert _waiting_on_a_lock(conn, scheduler_pid)
        # ...then b, while the scheduler waits for its batch.
        lock_stats(journal, [("https://x.example/b.git", "git")])
        journal.commit()
        thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        journal.close()
    assert "error" not in outcome, outcome.get("error")
    assert sorted(int(r["id"]) for r in outcome["rows"]) == sorted(ids.values())
    stamped = conn.execute(
        "select count(*) as n from origin_visit_stats where last_scheduled is not null"
    ).fetchone()
    assert stamped is not None and stamped["n"] == 2
    scheduler.close()
