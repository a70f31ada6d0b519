"""Writers that lock shared stats rows: a scheduling step and a journal batch in
opposite orders, a listing and a journal batch in one order whatever the
database's collation."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from app.db.connection import DictConnection, connect
from app.db.listings import register_lister
from app.db.migrate import migrate
from app.db.stats import lock_stats
from app.inputs.listing import ListedOriginIn
from app.listers.interface import ListerInterface
from app.listers.tasks import TaskInterface
from app.services.context import Context
from app.services.listing import finish_listing, record_listed_origins, start_listing
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


def _crossed(
    holder: DictConnection,
    first: Callable[[], object],
    waiter: DictConnection,
    work: Callable[[], object],
    second: Callable[[], object],
    observer: DictConnection,
) -> dict[str, Any]:
    """In ``holder``'s transaction run ``first``; then ``work`` on a thread, with
    ``waiter``, until it waits on a lock; then ``second``, and commit. What
    ``work`` returned (``done``) or raised (``error``); both connections closed."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["done"] = work()
        except Exception as exc:
            outcome["error"] = exc

    try:
        first()
        thread = threading.Thread(target=run)
        thread.start()
        assert _waiting_on_a_lock(observer, waiter.info.backend_pid)
        second()
        holder.commit()
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        holder.close()
        waiter.close()
    assert "error" not in outcome, outcome.get("error")
    return outcome


def _listed_b_then_a(conn: DictConnection, ctx: Context) -> dict[str, int]:
    """List b, then a: the later id has the earlier url, so a writer by id (as a
    step stamps) and one by key (the journal, listings) lock the two rows in
    opposite orders. Their ids by url."""
    list_origins(conn, ctx, [B], now=NOW)
    list_origins(conn, ctx, [A], now=NOW)
    return {r["url"]: r["id"] for r in conn.execute("select url, id from origin_visit_stats")}


def _holder_and_victim(settings: Settings) -> tuple[DictConnection, DictConnection]:
    """Two connections, the first in a transaction: should the second wait in a
    deadlock with it, the second finds it first (after 1 s, long enough for the
    first to have asked for its second lock) and is the one aborted."""
    holder = connect(settings, autocommit=False)
    holder.execute("set deadlock_timeout = '20s'")
    victim = connect(settings)
    victim.execute("set deadlock_timeout = '1s'")
    return holder, victim


def test_a_step_that_deadlocks_with_a_journal_batch_still_stamps_and_sends_its_picks(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    _listed_b_then_a(conn, ctx)
    journal = connect(settings, autocommit=False)
    scheduler = connect(settings)
    outcome = _crossed(
        journal,
        lambda: lock_stats(journal, [(A, "git")]),  # the journal's batch locks a...
        scheduler,
        lambda: schedule_step(scheduler, ctx, "git", 10, NOW),
        lambda: lock_stats(journal, [(B, "git")]),  # ...then b, held by the waiting step
        conn,
    )
    assert sorted(o.url for o in outcome["done"].orders) == [A, B]
    stamped = conn.execute(
        "select count(*) as n from origin_visit_stats where last_scheduled = %s", (NOW,)
    ).fetchone()
    assert stamped is not None and stamped["n"] == 2


@pytest.fixture
def en_us_settings(settings: Settings) -> Iterator[Settings]:
    """The test's settings on a migrated database collated as en_US.UTF-8 (the
    locale scripts/setup generates), where 'Zed' sorts after 'abc' (in byte
    order, before it)."""
    admin = settings.database_dsn()
    name = f"t_en_us_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            f"create database {name} template template0 encoding 'UTF8' locale 'en_US.UTF-8'"
        )
    info = psycopg.conninfo.conninfo_to_dict(admin)
    info["dbname"] = name
    url = psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
    try:
        migrate(url)
        yield settings.model_copy(update={"database_url": SecretStr(url)})
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"drop database if exists {name} with (force)")


def test_a_listing_and_a_journal_batch_lock_shared_rows_in_one_order_whatever_the_collation(
    en_us_settings: Settings, ctx: Context
) -> None:
    upper, lower = "https://x.example/Zed.git", "https://x.example/abc.git"
    setup = connect(en_us_settings)
    order = setup.execute(
        "select u from (values (%s), (%s)) v(u) order by u", (upper, lower)
    ).fetchall()
    assert [r["u"] for r in order] == [lower, upper], "the database does not collate as en_US"
    list_origins(setup, ctx, [upper, lower], now=NOW)
    journal = connect(en_us_settings, autocommit=False)
    # Short, so that a deadlock is found by the journal's wait, not the listing's.
    journal.execute("set deadlock_timeout = '100ms'")
    listing = connect(en_us_settings)
    # The journal locks its keys in byte order: Zed, then abc; the waiting
    # listing must not hold abc (no deadlock: the journal goes on).
    _crossed(
        journal,
        lambda: lock_stats(journal, [(upper, "git")]),
        listing,
        lambda: list_origins(listing, ctx, [upper, lower], now=NOW),
        lambda: lock_stats(journal, [(lower, "git")]),
        setup,
    )
    setup.close()


@pytest.mark.parametrize("entry", ["import", "lister_api"])
def test_a_listing_that_deadlocks_with_a_step_locking_by_id_is_run_again_and_recorded(
    settings: Settings, conn: DictConnection, ctx: Context, entry: str
) -> None:
    ids = _listed_b_then_a(conn, ctx)
    step, listing = _holder_and_victim(settings)
    later = datetime(2026, 11, 2, tzinfo=UTC)

    def relist() -> None:
        lister = register_lister(listing, "test", "forge", None)
        if entry == "import":
            rows = [
                (i + 1, ListedOriginIn(url=u, visit_type="git", last_update=later))
                for i, u in enumerate([A, B])
            ]
            record_listed_origins(listing, ctx, lister, rows, later)
        else:
            ListerInterface(listing, ctx, lambda: later).record_listed_origins(
                [
                    {"lister_id": lister, "url": u, "visit_type": "git", "last_update": later}
                    for u in [A, B]
                ]
            )

    lock = "select id from origin_visit_stats where id = %s for update"
    _crossed(
        step,
        lambda: step.execute(lock, (ids[B],)),  # the step locks b (the lower id)...
        listing,
        relist,
        lambda: step.execute(lock, (ids[A],)),  # ...then a, which the waiting listing holds
        conn,
    )
    updated = conn.execute(
        "select count(*) as n from origin_visit_stats where last_update = %s", (later,)
    ).fetchone()
    assert updated is not None and updated["n"] == 2


@pytest.mark.parametrize("first", [A, B])
def test_a_full_listing_that_disables_origins_runs_again_after_a_deadlock(
    settings: Settings, conn: DictConnection, ctx: Context, first: str
) -> None:
    # Whichever row the other writer locks first, the disabling locks the two
    # in one order of its own: in one of the cases they cross.
    list_origins(conn, ctx, [A, B], now=NOW)
    lister = register_lister(conn, "test", "forge", None)
    later = datetime(2026, 11, 2, tzinfo=UTC)
    started = start_listing(conn, lister, later)
    journal, listing = _holder_and_victim(settings)
    second = B if first == A else A
    outcome = _crossed(
        journal,
        lambda: lock_stats(journal, [(first, "git")]),
        listing,
        lambda: finish_listing(listing, ctx, lister, started, later, full=True),
        lambda: lock_stats(journal, [(second, "git")]),
        conn,
    )
    assert outcome == {"done": 2}
    listed = conn.execute("select count(*) as n from origin_visit_stats where listed").fetchone()
    assert listed is not None and listed["n"] == 0


@pytest.mark.parametrize("other", ["journal", "step"])
def test_a_visit_stats_upsert_neither_deadlocks_with_the_journal_nor_fails_on_a_step(
    settings: Settings, conn: DictConnection, ctx: Context, other: str
) -> None:
    ids = _listed_b_then_a(conn, ctx)  # the journal locks a then b, a step b then a
    holder, upsert = _holder_and_victim(settings)
    if other == "journal":
        # The journal's wait finds a deadlock first: it would be the one aborted.
        holder.execute("set deadlock_timeout = '100ms'")

    def take(url: str) -> object:
        if other == "journal":
            return lock_stats(holder, [(url, "git")])
        return holder.execute(
            "select from origin_visit_stats where id = %s for update", (ids[url],)
        )

    order = [A, B] if other == "journal" else [B, A]
    visited = datetime(2026, 11, 2, tzinfo=UTC)
    stats = [
        {"url": u, "visit_type": "git", "last_visit": visited, "last_visit_status": "failed"}
        for u in [B, A]  # given out of the journal's order
    ]
    api = TaskInterface(upsert, ctx, lambda: visited)
    _crossed(
        holder,
        lambda: take(order[0]),
        upsert,
        lambda: api.origin_visit_stats_upsert(stats),
        lambda: take(order[1]),
        conn,
    )
    written = conn.execute(
        "select count(*) as n from origin_visit_stats where last_visit = %s", (visited,)
    ).fetchone()
    assert written is not None and written["n"] == 2
