"""The processes the tests and the soak start die with what started them: a
pytest or a soak killed with SIGKILL (no exit handler runs) leaves nothing
running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
#: A harness starting ``sleep 600`` by each starter, then printing its pid.
STARTERS = {
    "tests.processes.running": """
import sys, time
from pathlib import Path
from tests.processes import running
with running({"child": ["sleep", "600"]}, {}, Path(sys.argv[1])) as procs:
    print(procs["child"].pid, flush=True)
    time.sleep(600)
""",
    "benchmarks.soak_supervisor.Supervisor": """
import sys, time
from pathlib import Path
from benchmarks import soak_supervisor
soak_supervisor.BIN = Path(sys.argv[1])  # its "revisit" sleeps
supervisor = soak_supervisor.Supervisor({"child": []}, {}, Path(sys.argv[1]))
supervisor.start("child")
print(supervisor.procs["child"].pid, flush=True)
time.sleep(600)
""",
}


def _sleeping(pid: int) -> bool:
    """The child has exec'd ``sleep 600`` (the soak's goes through /bin/sh first)."""
    try:
        return psutil.Process(pid).cmdline()[:2] == ["sleep", "600"]
    except psutil.NoSuchProcess:
        return False


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("starter", sorted(STARTERS))
def test_a_started_process_dies_when_its_starter_is_killed(starter: str, tmp_path: Path) -> None:
    revisit = tmp_path / "revisit"
    revisit.write_text("#!/bin/sh\nexec sleep 600\n")
    revisit.chmod(0o755)
    harness = subprocess.Popen(
        [sys.executable, "-c", STARTERS[starter], str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert harness.stdout is not None
    child = int(harness.stdout.readline())
    try:
        wait_for(lambda: _sleeping(child), 10, f"{starter}'s child {child} to run sleep 600")
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        wait_for(lambda: _gone(child), 10, f"{starter}'s child {child} to die")
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)
