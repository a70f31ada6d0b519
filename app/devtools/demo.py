"""``revisit demo``: the whole system on throwaway services and a local git forge.

A demo forge of real git repositories (file:// URLs) is listed, the Procfile
processes visit them, and a background "developer" commits to some of them
while it runs, so first visits, eventful revisits, uneventful revisits and a
not_found origin all show up in the summary printed every few seconds.

With ``--archive`` the git visit type runs the archive's own swh-loader-git
(loader ``swh-git``) into a memory swh-storage whose journal writer feeds the
journal client, and the demo ends with what the archive holds: each origin's
visits, last status, snapshot SWHID and branches.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app.db.connection import connect
from app.db.listings import register_lister
from app.db.migrate import migrate
from app.db.origins import demo_summary, recently_visited
from app.devtools import embedded
from app.inputs.listing import ListedOriginIn
from app.listers.runs import schedule_lister
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.visit_types import VisitTypeChange, set_visit_type
from app.settings import PROCFILE_METRICS_PORTS, Settings

PROCFILE = Path(__file__).resolve().parents[2] / "Procfile"

#: The settings naming services: where one is set, the demo uses that service
#: (``revisit demo --use-configured-services``), else a throwaway one.
SERVICE_VARIABLES = ("REVISIT_DATABASE_URL", "REVISIT_REDIS_URL", "REVISIT_KAFKA_BROKERS")
#: Settings that make the demo's time pass quickly: a ladder "day" is 5 s.
DEMO_ENV = {
    "REVISIT_WORKER_VISIT_TYPES_ALLOW": '["git"]',
    "REVISIT_ALLOWED_INTERNAL_HOSTS": '["localhost"]',  # the demo forge is on local disk
    "REVISIT_LADDER_UNIT_S": "5",
}
#: The archive's journal topics' prefix: its origin_visit_status topic is the
#: journal client's default topic.
ARCHIVE_PREFIX = "swh.journal.objects"
#: The archive's statuses of a visit that ended.
ENDED = ("full", "partial", "failed", "not_found")
#: How often the demo's incremental listing reports the repositories that changed.
DEMO_INCREMENTAL_S = 4


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a fixed identity; return its output."""
    identity = ["-c", "user.name=demo", "-c", "user.email=demo@example.org"]
    argv = ["git", "-C", str(repo), *identity, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def make_repo(path: Path) -> str:
    """A new git repository with one commit; returns its file:// URL."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    commit(path, "initial import")
    return path.as_uri()


def commit(repo: Path, message: str) -> None:
    """Add a commit to ``repo``."""
    with (repo / "CHANGES").open("a") as f:
        f.write(f"{datetime.now(tz=UTC).isoformat()} {message}\n")
    git(repo, "add", "CHANGES")
    git(repo, "commit", "-q", "-m", message)


def make_forge(root: Path, count: int) -> list[str]:
    """``count`` repositories under ``root``; returns their URLs."""
    return [make_repo(root / f"project-{i:03d}") for i in range(count)]


def list_forge(settings: Settings, forge: Path, gone_url: str) -> None:
    """Schedule the directory lister on the demo forge (the lister processes run it:
    a full listing every minute, an incremental one every few seconds), and record
    one deleted project, which no listing can find, by hand."""
    ctx = Context.from_settings(settings)
    with connect(settings) as conn:
        # Below the shortest interval a user may give (MIN_LISTER_INTERVAL_S),
        # so that the incremental listing reports commits while the demo runs.
        incremental = timedelta(seconds=DEMO_INCREMENTAL_S)
        schedule_lister(
            conn,
            "gitdir",
            "demo-forge",
            datetime.now(tz=UTC),
            arguments={"path": str(forge)},
            full_interval=timedelta(minutes=1),
            incremental_interval=incremental,
            shortest=incremental,
        )
        lister_id = register_lister(conn, "demo", "deleted-projects", None)
        gone = [(1, ListedOriginIn(url=gone_url, visit_type="git"))]
        record_listed_origins(conn, ctx, lister_id, gone, datetime.now(tz=UTC))


class Developer(threading.Thread):
    """Commits to a few repositories at random while the demo runs."""

    def __init__(self, repos: list[Path], every_s: float, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.repos, self.every_s, self.rng = repos, every_s, rng
        self.stop = threading.Event()
        self.commits = 0

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            repo = self.rng.choice(self.repos)
            commit(repo, f"change {self.commits}")
            self.commits += 1


#: The most visits the demo prints at each summary.
RECENT_LINES = 8


def summary(settings: Settings, developer: Developer, started: float) -> Table:
    """A table of what happened so far."""
    with connect(settings) as conn:
        row = demo_summary(conn)
    table = Table(title=f"revisit demo, {time.monotonic() - started:.0f}s")
    counted = ("lister_runs", "listed", "visited", "eventful", "uneventful", "failed", "not_found")
    for column in (*counted, "commits made"):
        table.add_column(column.replace("_", " "), justify="right")
    table.add_row(*(str(row.get(k, 0)) for k in counted), str(developer.commits))
    return table


class RecentVisits:
    """The visits the journal applied since the last look, as readable lines.

    Compared with what was shown rather than with the time of the last look:
    the journal applies a visit some time after it ended, so a visit that
    ended before the last look can be applied after it (a first visit, say)."""

    def __init__(self, since: datetime) -> None:
        self.since = since
        self.shown: dict[str, datetime] = {}

    def lines(self, settings: Settings) -> list[str]:
        """One line per origin whose last visit was not shown yet (newest first)."""
        with connect(settings) as conn:
            rows = recently_visited(conn, self.since)
        new = [r for r in rows if self.shown.get(r["url"]) != r["last_final_date"]]
        self.shown.update((r["url"], r["last_final_date"]) for r in new)
        return [_visit_line(r) for r in new[:RECENT_LINES]]


def _visit_line(r: Mapping[str, Any]) -> str:
    name = r["url"].rstrip("/").rsplit("/", 1)[-1]
    if r["status"] in ("failed", "not_found"):
        what = f"[red]{r['status'].replace('_', ' ')}[/red]"
    elif r["last_eventful"] == r["last_final_date"]:
        first = r["eventful_visits"] == 1
        what = "[green]first visit[/green]" if first else "[green]eventful: new commits[/green]"
    else:
        what = "[dim]uneventful: nothing new[/dim]"
    took = f"{r['last_duration_s']:.2f}s" if r["last_duration_s"] is not None else ""
    stamp = r["last_final_date"].strftime("%H:%M:%S")
    return f"  {stamp}  {name:<20} {what} {took}"


def _metrics_ports(environ: Mapping[str, str]) -> dict[str, str]:
    """Free ports for the Procfile's metrics ports not set, so that the demo runs
    beside a deployment of the Procfile on the same host."""
    return {v: str(embedded.free_port()) for v in PROCFILE_METRICS_PORTS if v not in environ}


def _start_processes(env: dict[str, str], root: Path) -> subprocess.Popen[bytes]:
    honcho = shutil.which("honcho", path=str(Path(sys.executable).parent)) or "honcho"
    return subprocess.Popen(
        [honcho, "-f", str(PROCFILE), "-d", str(PROCFILE.parent), "start"],
        env=env,
        stdout=(root / "processes.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def archive_holdings(config: Path, urls: list[str]) -> list[str]:
    """What the archive holds of each origin: its last visit that ended (one may
    still run), its status, snapshot and branches."""
    from swh.core.config import read
    from swh.storage import get_storage
    from swh.storage.algos.origin import origin_get_latest_visit_status

    storage = get_storage(**read(str(config))["storage"])
    lines = []
    for url in urls:
        name = url.rstrip("/").rsplit("/", 1)[-1]
        final = origin_get_latest_visit_status(storage, url, allowed_statuses=list(ENDED))
        if final is None:
            lines.append(f"  {name:<20} not visited")
            continue
        line = f"  {name:<20} visit {final.visit}: {final.status}"
        if final.snapshot is not None:
            found = storage.snapshot_get_branches(final.snapshot)
            branches: dict[bytes, Any] = found["branches"] if found else {}
            names = ", ".join(sorted(b.decode(errors="replace") for b in branches))
            line += f"  swh:1:snp:{final.snapshot.hex()}  [{names}]"
        lines.append(line)
    return lines


def run_demo(
    repo_count: int, duration_s: float | None, console: Console, archive: bool = False
) -> int:
    """Run the demo until Ctrl-C (or ``duration_s``); return the exit code."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="revisit-demo-") as tmp:
        root = Path(tmp)
        console.print("starting services (embedded where none is configured)...")
        with contextlib.ExitStack() as stack:
            configured = (os.environ.get(k) for k in SERVICE_VARIABLES)
            service_env = stack.enter_context(embedded.services(*configured))
            os.environ.update({**DEMO_ENV, **service_env, **_metrics_ports(os.environ)})
            if archive:
                console.print("starting the archive's storage (memory, journal to Kafka)...")
                brokers = service_env["REVISIT_KAFKA_BROKERS"]
                config = stack.enter_context(
                    embedded.archive_storage(root, brokers, ARCHIVE_PREFIX)
                )
                # The journal client follows the archive's journal; its loaders store there.
                os.environ["REVISIT_JOURNAL_TOPIC"] = f"{ARCHIVE_PREFIX}.origin_visit_status"
                os.environ["SWH_CONFIG_FILENAME"] = str(config)
            # The RPC server must bind: a port taken by another demo would stop it.
            os.environ.setdefault("REVISIT_RPC_PORT", str(embedded.free_port()))
            env = dict(os.environ)
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
            settings = Settings()
            for m in migrate(settings.database_dsn()):
                console.print(f"schema: applied {m.version:04d} {m.name}")
            if archive:
                with connect(settings) as conn:
                    set_visit_type(conn, VisitTypeChange(name="git", loader="swh-git"))
            urls = make_forge(root / "forge", repo_count)
            list_forge(settings, root / "forge", (root / "forge" / "deleted-project").as_uri())
            console.print(
                f"{repo_count} repositories to be listed by the gitdir lister, and one deleted "
                f"project; processes log to {root / 'processes.log'}"
            )
            changing = [Path(u.removeprefix("file://")) for u in urls[: max(2, repo_count // 3)]]
            developer = Developer(changing, 3.0, random.Random(1))
            procs = _start_processes(env, root)
            developer.start()
            started = time.monotonic()
            recent = RecentVisits(datetime.now(tz=UTC))
            try:
                while not stop.wait(5.0):
                    console.print(summary(settings, developer, started))
                    for line in recent.lines(settings):
                        console.print(line)
                    if procs.poll() is not None:
                        # The log goes with the throwaway folder: show what led
                        # to the first process's exit (honcho then stops the rest).
                        lines = (root / "processes.log").read_text(errors="replace").splitlines()
                        first = next((k for k, x in enumerate(lines) if "stopped (rc=" in x), -1)
                        console.print(
                            "\n".join(lines[max(0, first - 40) : first + 1]), markup=False
                        )
                        console.print("[red]a process exited (its log above)[/red]")
                        return 1
                    if duration_s is not None and time.monotonic() - started >= duration_s:
                        break
            finally:
                developer.stop.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(procs.pid, signal.SIGINT)
                try:
                    procs.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(procs.pid, signal.SIGKILL)
                console.print(summary(settings, developer, started))
                if archive:
                    console.print("what the archive holds:")
                    gone = (root / "forge" / "deleted-project").as_uri()
                    for line in archive_holdings(config, [*urls, gone]):
                        console.print(line, markup=False, highlight=False)
                console.print("stopped.")
    return 0
