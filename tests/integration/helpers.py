"""Shared steps of the integration tests."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

from app.context import Context
from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.listing import record_listed_origins
from app.listing_input import ListedOriginIn


def list_origins(
    conn: DictConnection,
    ctx: Context,
    urls: list[str],
    visit_type: str = "git",
    now: datetime | None = None,
) -> None:
    """Register a test lister and record ``urls`` as its origins."""
    lister_id = register_lister(conn, "test", "forge", None)
    rows = [(i + 1, ListedOriginIn(url=u, visit_type=visit_type)) for i, u in enumerate(urls)]
    record_listed_origins(conn, ctx, lister_id, rows, now or datetime.now(tz=UTC))


def stats_by_url(conn: DictConnection) -> dict[str, dict[str, object]]:
    """Every stats row, by URL, without its ``version`` (every write bumps it, even
    one that changes nothing else, such as a replayed status)."""
    rows = conn.execute("select * from origin_visit_stats").fetchall()
    return {str(r["url"]): {k: v for k, v in r.items() if k != "version"} for r in rows}


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``revisit ARGS`` as a user would (the test's REVISIT_* environment)."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
