"""The README's first command, as a user runs it (on embedded services)."""

import os
import re
import subprocess
import sys
from pathlib import Path


def test_demo_visits_every_listed_repository_and_stops_cleanly() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVISIT_")}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "revisit"), "demo", "--repos", "6", "--duration", "25"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stopped." in proc.stdout
    # The last summary row: lister runs, listed, visited, eventful, uneventful, failed,
    # commits made.
    rows = re.findall(r"│" + r"\s+(\d+) │" * 7, proc.stdout)
    lister_runs, listed, visited, eventful, uneventful, failed, commits = map(int, rows[-1])
    assert lister_runs >= 2  # the gitdir lister's full listing, then incremental ones
    assert listed == 7 and visited == 7  # 6 repositories and the deleted project
    assert eventful >= 6 and uneventful > 0 and failed >= 1 and commits > 0
