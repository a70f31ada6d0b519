"""The Procfile, the one list of long-running processes, as what runs in
production: a systemd unit per line (``revisit systemd-units``), or ``revisit
up``, a runner that restarts a crashed process instead of stopping the others.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from app.domain.backoff import Backoff
from app.loaders.zygote import dying_with_this_process

#: The Procfile of a single host; Procfile.control and Procfile.workers split it.
PROCFILE = Path(__file__).resolve().parents[2] / "Procfile"
#: The settings file every unit reads (``%E``: /etc, or the user's configuration folder).
UNIT_ENVIRONMENT_FILE = "%E/revisit/revisit.env"
#: Seconds systemd waits before starting a crashed process again.
UNIT_RESTART_S = 5
#: How long a process may take to stop (the journal group's children take up to
#: 30 s to leave the consumer group) before its whole group is killed.
STOP_GRACE_S = 45.0
#: Waits of ``revisit up`` before restarting a process that keeps crashing.
RESTART_BACKOFF = (1.0, 60.0)
#: A process that ran this long before it crashed is restarted after the shortest wait.
HEALTHY_RUN_S = 60.0
#: How often ``revisit up`` looks at its processes.
POLL_S = 0.2

_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(\S.*)$")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ProcfileError(ValueError):
    """A Procfile that cannot be read; the text names the line."""


@dataclass(frozen=True)
class ProcessLine:
    """One Procfile line: ``name: [VAR=value ...] program args``."""

    name: str
    environment: dict[str, str]
    argv: tuple[str, ...]


def read_procfile(path: Path, environ: Mapping[str, str]) -> list[ProcessLine]:
    """The processes of the Procfile at ``path``, their ``${VAR}`` and ``${VAR:-default}``
    expanded from ``environ`` as the shell does."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProcfileError(f"{path}: {exc.strerror}") from exc
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        match = _LINE.match(raw.strip())
        if match is None:
            raise ProcfileError(f"{path}:{number}: not 'name: command'")
        words = shlex.split(match[2])
        words = [_REFERENCE.sub(lambda m: environ.get(m[1]) or m[2] or "", w) for w in words]
        environment = {}
        while words and (assignment := _ASSIGNMENT.match(words[0])):
            environment[assignment[1]] = assignment[2]
            words.pop(0)
        if not words:
            raise ProcfileError(f"{path}:{number}: no command")
        lines.append(ProcessLine(match[1], environment, tuple(words)))
    names = [p.name for p in lines]
    if duplicated := sorted({n for n in names if names.count(n) > 1}):
        raise ProcfileError(f"{path}: process named twice: {', '.join(duplicated)}")
    if not lines:
        raise ProcfileError(f"{path}: no process")
    return lines


def select(lines: list[ProcessLine], names: list[str]) -> list[ProcessLine]:
    """The lines named (all when none is); refuses a name the Procfile lacks."""
    unknown = sorted(set(names) - {p.name for p in lines})
    if unknown:
        known = ", ".join(p.name for p in lines)
        raise ProcfileError(f"no process {', '.join(unknown)} in the Procfile (it has {known})")
    return [p for p in lines if not names or p.name in names]


def _program(name: str) -> str:
    """The absolute path of a program: this installation's console scripts first."""
    if "/" in name:
        return name
    installed = Path(sys.executable).parent / name
    return str(installed) if installed.exists() else shutil.which(name) or name


def _unit_word(word: str) -> str:
    """``word`` quoted for a unit file (systemd expands ``%`` and ``$``)."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if re.search(r"[\s\"'\\;]", escaped) or not escaped:
        return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return escaped


def unit_name(process: str) -> str:
    """The systemd unit of a Procfile process."""
    return f"revisit-{process}.service"


def systemd_units(lines: list[ProcessLine], *, user: bool) -> dict[str, str]:
    """File name -> text of a service unit per process and ``revisit.target``."""
    units = {}
    network = "" if user else "After=network-online.target\nWants=network-online.target\n"
    for p in lines:
        exec_start = " ".join(_unit_word(w) for w in (_program(p.argv[0]), *p.argv[1:]))
        environment = "".join(
            f"Environment={_unit_word(f'{k}={v}')}\n" for k, v in p.environment.items()
        )
        units[unit_name(p.name)] = (
            "[Unit]\n"
            f"Description=revisit {p.name} (Procfile)\n"
            "PartOf=revisit.target\n"
            f"{network}"
            "StartLimitIntervalSec=0\n"
            "\n[Service]\n"
            "Type=exec\n"
            f"ExecStart={exec_start}\n"
            f"{environment}"
            f"EnvironmentFile=-{UNIT_ENVIRONMENT_FILE}\n"
            "Restart=always\n"
            f"RestartSec={UNIT_RESTART_S}\n"
            "KillMode=control-group\n"
            f"TimeoutStopSec={STOP_GRACE_S:.0f}\n"
            "\n[Install]\n"
            "WantedBy=revisit.target\n"
        )
    wants = " ".join(unit_name(p.name) for p in lines)
    units["revisit.target"] = (
        "[Unit]\n"
        "Description=revisit: every process of the Procfile\n"
        f"Wants={wants}\n"
        "\n[Install]\n"
        f"WantedBy={'default.target' if user else 'multi-user.target'}\n"
    )
    return units


@dataclass
class _Running:
    """One Procfile process under ``revisit up``."""

    line: ProcessLine
    backoff: Backoff = field(default_factory=lambda: Backoff(*RESTART_BACKOFF))
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float = 0.0


class ProcfileRunner:
    """Runs Procfile processes, restarting each that exits until told to stop."""

    def __init__(self, lines: list[ProcessLine], environ: Mapping[str, str], out: IO[str]) -> None:
        self.processes = [_Running(line) for line in lines]
        self.environ, self.out = dict(environ), out
        self.width = max(len(line.name) for line in lines)
        self._stop = threading.Event()
        self._print = threading.Lock()
        self._die_with_runner = dying_with_this_process(signal.SIGTERM)

    def stop(self) -> None:
        """Stop every process (a signal handler's call)."""
        self._stop.set()

    def say(self, name: str, text: str) -> None:
        """One line of output, prefixed with the time and the process name."""
        stamp = datetime.now().strftime("%H:%M:%S")
        with self._print:
            self.out.write(f"{stamp} {name:<{self.width}} | {text}\n")
            self.out.flush()

    def run(self) -> int:
        """Run until SIGTERM or SIGINT; 0 once every process has stopped."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop())
        for running in self.processes:
            self._start(running)
        while not self._stop.wait(POLL_S):
            now = time.monotonic()
            for running in self.processes:
                if running.proc is None:
                    if now >= running.restart_at:
                        self._start(running)
                    continue
                code = running.proc.poll()
                if code is not None:
                    self._restart_later(running, code, now)
        return self._stop_all()

    def _start(self, running: _Running) -> None:
        env = {**self.environ, **running.line.environment}
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        try:
            proc = subprocess.Popen(
                running.line.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=self._die_with_runner,  # only prctl and getppid in the child
            )
        except OSError as exc:
            delay = running.backoff.next_delay_s()
            self.say(running.line.name, f"cannot start ({exc}): trying again in {delay:.0f}s")
            running.restart_at = time.monotonic() + delay
            return
        running.proc, running.started = proc, time.monotonic()
        self.say(running.line.name, f"started (pid {proc.pid})")
        assert proc.stdout is not None
        threading.Thread(
            target=self._copy_output, args=(running.line.name, proc.stdout), daemon=True
        ).start()

    def _copy_output(self, name: str, stream: IO[bytes]) -> None:
        for raw in stream:
            self.say(name, raw.decode(errors="replace").rstrip("\n"))

    def _restart_later(self, running: _Running, code: int, now: float) -> None:
        assert running.proc is not None
        _kill_group(running.proc.pid, signal.SIGKILL)  # its children, holding ports
        ran = now - running.started
        if ran >= HEALTHY_RUN_S:
            running.backoff.reset()
        delay = running.backoff.next_delay_s()
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"code {code}"
        self.say(running.line.name, f"exited ({how}) after {ran:.0f}s: restarting in {delay:.0f}s")
        running.proc, running.restart_at = None, now + delay

    def _stop_all(self) -> int:
        alive = [(r.line.name, r.proc) for r in self.processes if r.proc is not None]
        for _, proc in alive:
            _kill_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in alive:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(name, f"did not stop within {STOP_GRACE_S:.0f}s: killed")
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
            self.say(name, "stopped")
        return 0


def _kill_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
