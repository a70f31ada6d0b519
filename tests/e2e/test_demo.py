"""The README's first command, as a user runs it (on embedded services)."""

import os
import re
from datetime import UTC, datetime, timedelta

import pytest

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.db.origins import demo_summary
from app.devtools.demo import RecentVisits
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.settings import Settings
from tests.e2e import run_to_the_end


def test_demo_visits_every_listed_repository_and_stops_cleanly() -> None:
    out = run_to_the_end("demo", "--repos", "6", "--duration", "25", timeout=240)
    assert "stopped." in out
    # The last summary row: lister runs, listed, visited, eventful, uneventful, failed,
    # not found, commits made.
    rows = re.findall(r"│" + r"\s+(\d+) │" * 8, out)
    lister_runs, listed, visited, eventful, uneventful, failed, not_found, commits = map(
        int, rows[-1]
    )
    assert lister_runs >= 2  # the gitdir lister's full listing, then incremental ones
    assert listed == 7 and visited == 7  # 6 repositories and the deleted project
    assert eventful >= 6 and uneventful > 0 and commits > 0
    assert failed == 0 and not_found >= 1  # the deleted project
    # A first visit shows unless the origin's next visit was applied before the
    # demo looked (every 5 s: a ladder day).
    assert re.search(r"project-\d+ +first visit", out)
    assert re.search(r"deleted-project +not found", out)


def test_the_archive_demo_visits_with_swh_loader_git_and_prints_what_the_archive_holds() -> None:
    try:
        import swh.loader.git  # noqa: F401
    except ImportError as exc:
        message = f"the archive's packages are not installed: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    out = run_to_the_end("demo", "--archive", "--repos", "3", "--duration", "30", timeout=240)
    held = out.split("what the archive holds:", 1)[1]
    snapshots = re.findall(r"project-\d+ +visit \d+: full +swh:1:snp:[0-9a-f]{40} +\[(.*)\]", held)
    assert len(snapshots) == 3
    assert all("refs/heads/main" in branches for branches in snapshots)
    assert re.search(r"deleted-project +visit \d+: failed", held)


def test_the_demo_shows_a_visit_the_journal_applied_after_it_last_looked_and_not_found_apart(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    started = datetime.now(tz=UTC)
    lister = register_lister(conn, "demo", "forge", None)
    urls = ["file:///forge/project-000", "file:///forge/deleted-project"]
    listed = [(i, ListedOriginIn(url=u, visit_type="git")) for i, u in enumerate(urls, 1)]
    record_listed_origins(conn, ctx, lister, listed, started)
    recent = RecentVisits(started)
    assert recent.lines(settings) == []
    # Both visits ended before the demo's next look; the journal applies them after it.
    ended = datetime.now(tz=UTC)
    assert recent.lines(settings) == []
    conn.execute(
        "update origin_visit_stats set last_final_date = %s, last_visit_status = 'full',"
        " last_eventful = %s, eventful_visits = 1 where url = %s",
        (ended, ended, urls[0]),
    )
    conn.execute(
        "update origin_visit_stats set last_final_date = %s, last_visit_status = 'not_found',"
        " failed_visits = 1 where url = %s",
        (ended + timedelta(seconds=1), urls[1]),
    )
    lines = recent.lines(settings)
    assert len(lines) == 2
    assert re.search(r"deleted-project +\[red\]not found", lines[0])
    assert re.search(r"project-000 +\[green\]first visit", lines[1])
    assert recent.lines(settings) == []  # each visit shown once
    counts = demo_summary(conn)
    assert (counts["failed"], counts["not_found"]) == (0, 1)
