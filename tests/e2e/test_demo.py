"""The README's first command, as a user runs it (on embedded services)."""

import os
import re

import pytest

from tests.e2e import run_to_the_end


def test_demo_visits_every_listed_repository_and_stops_cleanly() -> None:
    out = run_to_the_end("demo", "--repos", "6", "--duration", "25", timeout=240)
    assert "stopped." in out
    # The last summary row: lister runs, listed, visited, eventful, uneventful, failed,
    # commits made.
    rows = re.findall(r"│" + r"\s+(\d+) │" * 7, out)
    lister_runs, listed, visited, eventful, uneventful, failed, commits = map(int, rows[-1])
    assert lister_runs >= 2  # the gitdir lister's full listing, then incremental ones
    assert listed == 7 and visited == 7  # 6 repositories and the deleted project
    assert eventful >= 6 and uneventful > 0 and failed >= 1 and commits > 0


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
