"""Processes started from a folder that holds folders named like revisit's
packages still run revisit's own code: every interpreter revisit starts runs in
Python's safe-path mode, so the working directory is not on the import path."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from app.rpc.codec import decode, encode
from app.settings import Settings
from tests.integration.helpers import free_port
from tests.processes import running, wait_for

pytestmark = pytest.mark.integration

#: revisit's top-level packages; a folder of each name is put in the working directory.
PACKAGES = ("app", "actors", "queues", "monitoring", "sql")


@pytest.fixture
def shadowing_dir(tmp_path: Path) -> Path:
    """A working directory whose package folders stop any interpreter importing them."""
    cwd = tmp_path / "cwd"
    for name in PACKAGES:
        (cwd / name / "queries").mkdir(parents=True)
        (cwd / name / "__init__.py").write_text(
            'raise SystemExit("shadowed: imported from the working directory")\n'
        )
    return cwd


def lister_get(port: int) -> tuple[int, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/lister/get",
        data=encode({"name": "nobody"}),
        headers={"content-type": "application/x-msgpack"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, decode(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, None


def test_processes_started_beside_folders_named_like_revisits_packages_run_revisit(
    settings: Settings, shadowing_dir: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    port = free_port()
    commands = {
        "rpc": ["revisit", "rpc"],
        "scheduler": ["revisit", "scheduler"],
        "journal": ["revisit", "journal", "--processes", "2"],
        "worker": ["revisit", "worker", "--lane", "all"],
        "api": ["revisit", "api"],
        "lister_worker": ["revisit", "lister", "worker"],
    }
    with running(commands, {"REVISIT_RPC_PORT": str(port)}, logs, cwd=shadowing_dir) as procs:
        wait_for(lambda: lister_get(port)[0] != 0, 30, "the RPC server", logs)
        assert lister_get(port) == (200, None)
        time.sleep(5)  # long enough for every process to have imported its code
        exited = {name: p.returncode for name, p in procs.items() if p.poll() is not None}
    output = {path.stem: path.read_text(errors="replace") for path in logs.glob("*.log")}
    assert exited == {}, output
    assert not [name for name, text in output.items() if "shadowed" in text], output
