"""The soak's supervisor: runs revisit's processes and starts again those that die."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from app.loaders.zygote import dying_with_this_process

BIN = Path(sys.executable).parent


class Supervisor:
    """Runs the processes; starts again those that die, telling kills from crashes."""

    def __init__(
        self,
        commands: dict[str, list[str]],
        env: dict[str, str],
        logdir: Path,
        own: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.commands = commands
        self.env = {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        self.own = own or {}  # a process's own settings (its metrics port)
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()
        self.by_hand: Counter[str] = Counter()
        #: (process, time.monotonic()) of each restart by hand.
        self.by_hand_at: list[tuple[str, float]] = []

    def start(self, name: str) -> None:
        log = (self.logdir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [str(BIN / "revisit"), *self.commands[name]],
            env={**self.env, **self.own.get(name, {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dying_with_this_process(),  # not left running by a killed soak
        )

    def kill(self, name: str) -> None:
        """kill -9 the process and its children."""
        self.killed.add(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[name].pid, signal.SIGKILL)

    def kill_main(self, name: str) -> None:
        """kill -9 the process alone: its children must stop by themselves."""
        self.killed.add(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.procs[name].pid, signal.SIGKILL)

    def pause(self, name: str, seconds: float) -> None:
        """Stop the process and its children (SIGSTOP) for ``seconds``, then resume them."""
        group = self.procs[name].pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGSTOP)
        time.sleep(seconds)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)

    def tend(self) -> None:
        """Start again every process that is gone (a supervisor's job, not a person's)."""
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            if name in self.killed:
                self.killed.discard(name)
            else:
                self.by_hand[name] += 1
                self.by_hand_at.append((name, time.monotonic()))
            self.start(name)

    def stop_all(self, last: str | None = None, last_after_s: float = 5.0) -> None:
        """Stop every process (SIGTERM, then SIGKILL after 20 s); ``last`` only
        ``last_after_s`` after the others have stopped; idempotent."""
        if last in self.procs:
            keep = self.procs.pop(last)
            self.stop_all()
            time.sleep(last_after_s)
            self.procs[last] = keep
        procs, self.procs = list(self.procs.values()), {}
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
