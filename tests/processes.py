"""Starting revisit's own processes (as the Procfile does) from tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from app.loaders.zygote import dying_with_this_process

BIN = Path(sys.executable).parent


#: The module constants a started process sets (tests/process_constants/sitecustomize.py).
CONSTANTS_VARIABLE = "REVISIT_TEST_CONSTANTS"
CONSTANTS_HOOK = str(Path(__file__).parent / "process_constants")


def with_constants(
    constants: Mapping[str, float], env: dict[str, str] | None = None
) -> dict[str, str]:
    """``env`` with module constants of the started processes set, ``{"module.NAME":
    value}``: the timings no operator tunes, shortened for a test (or a benchmark)."""
    env = {**(env or {}), CONSTANTS_VARIABLE: json.dumps(constants)}
    path = env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (CONSTANTS_HOOK, path) if p)
    return env


def _environment(env: dict[str, str]) -> dict[str, str]:
    """The environment of a started process: this one's, ``env`` over it, the
    constants of both merged."""
    full = {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    constants = {
        **json.loads(os.environ.get(CONSTANTS_VARIABLE, "{}")),
        **json.loads(env.get(CONSTANTS_VARIABLE, "{}")),
    }
    if constants:
        full[CONSTANTS_VARIABLE] = json.dumps(constants)
        full["PYTHONPATH"] = os.pathsep.join(
            p for p in (CONSTANTS_HOOK, full.get("PYTHONPATH")) if p
        )
    return full


@contextlib.contextmanager
def running(
    commands: dict[str, list[str]], env: dict[str, str], logdir: Path, cwd: Path | None = None
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Start each named command with ``env`` (in ``cwd``); stop them all (SIGTERM) on
    exit, or when this process dies (killed, its group and exit handlers spared)."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    full_env = _environment(env)
    try:
        for name, argv in commands.items():
            log = (logdir / f"{name}.log").open("wb")
            procs[name] = subprocess.Popen(
                argv,
                env=full_env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=dying_with_this_process(),  # not left running by a killed test
            )
        yield procs
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, logdir: Path | None = None
) -> None:
    """Poll ``condition`` until true; fail with ``what`` (and the process logs) on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    logs = ""
    if logdir is not None:
        for path in sorted(logdir.glob("*.log")):
            logs += f"\n--- {path.name} ---\n{path.read_text(errors='replace')[-3000:]}"
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{logs}")
