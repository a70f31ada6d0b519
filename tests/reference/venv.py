"""The reference scheduler's client, in a virtualenv of its own (never a dependency
of revisit): tests that drive it run scripts with its interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The reference release revisit's RPC server is checked against.
REFERENCE = "swh-scheduler==3.6.0"
VENV = Path(__file__).resolve().parents[2] / ".revisit" / "swh-reference"


def _has_client(python: Path) -> bool:
    probe = subprocess.run(
        [str(python), "-c", "import swh.scheduler.api.client"], capture_output=True, check=False
    )
    return probe.returncode == 0


def reference_python() -> Path:
    """An interpreter that imports ``swh.scheduler``: REVISIT_TEST_REFERENCE_PYTHON,
    else ``.revisit/swh-reference``, created and installed on first use (minutes)."""
    given = os.environ.get("REVISIT_TEST_REFERENCE_PYTHON")
    if given:
        return Path(given)
    python = VENV / "bin" / "python"
    if python.exists() and _has_client(python):
        return python
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", REFERENCE],
        capture_output=True,
        text=True,
        check=False,
    )
    if install.returncode != 0 or not _has_client(python):
        raise RuntimeError(f"cannot install {REFERENCE}: {install.stderr[-2000:]}")
    return python
