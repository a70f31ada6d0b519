"""Shared steps of the integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.listing import record_listed_origins
from tests.processes import running, wait_for


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


def cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``revisit ARGS`` as a user would (the test's REVISIT_* environment, and ``env``)."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        input=stdin,
        env={**os.environ, **env} if env else None,
        capture_output=True,
        text=True,
        check=False,
    )


def run_visits(
    tmp_path: Path,
    env: dict[str, str],
    until: Callable[[], bool],
    what: str,
    timeout_s: float = 60,
    threads: int = 4,
) -> Path:
    """Run the scheduler, a worker pool of every lane and the journal client as
    processes until ``until()``; return the folder of their logs."""
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "scheduler": ["revisit", "scheduler"],
        "worker": ["revisit", "worker", "--lane", "all", "--threads", str(threads)],
        "journal": ["revisit", "journal"],
    }
    with running(procs, env, logs):
        wait_for(until, timeout_s, what, logs)
    return logs
