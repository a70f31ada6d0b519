"""End-to-end runs of revisit's commands as a user starts them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_to_the_end(*argv: str, timeout: float) -> str:
    """Run ``revisit ARGV`` (or ``python -m`` when ARGV starts with ``-m``) from the
    project's folder, without the caller's REVISIT_* variables; its standard output,
    once it exited 0 (else the test fails with the end of what it printed)."""
    command = [sys.executable, *argv] if argv[0] == "-m" else [_revisit(), *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVISIT_")}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _revisit() -> str:
    return str(Path(sys.executable).parent / "revisit")
