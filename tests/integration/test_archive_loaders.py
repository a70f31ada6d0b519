"""The archive's own loaders run the visits, and the archive's journal closes the loop:
swh-loader-git writes to a swh-storage (``swh storage rpc-serve``, memory backend)
whose Kafka journal writer publishes the visit statuses to the journal topic
revisit's journal client reads; real PostgreSQL, Redis, tansu, Dramatiq workers
and git repositories served over http on 127.0.0.1. Under CI=true a missing
archive package fails these tests."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from app.db.connection import DictConnection
from app.devtools import embedded
from app.devtools.demo import commit, git, make_repo
from app.inputs.api import RequestVisit
from app.services.context import Context
from app.services.requests import create_request, get_request
from app.settings import Settings
from tests.conftest import IN_CI
from tests.integration.helpers import cli, list_origins, stats_by_url
from tests.processes import running, wait_for, with_constants

FAST = {"actors.scheduler.POLL_INTERVAL_S": 0.2}
PROCESSES = {
    "scheduler": ["revisit", "scheduler"],
    "worker": ["revisit", "worker", "--lane", "all", "--threads", "2"],
    "journal": ["revisit", "journal"],
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _archive_packages() -> None:
    try:
        import swh.loader.git
        import swh.storage  # noqa: F401
    except ImportError as exc:
        message = f"the archive's packages are not installed (pip install -e '.[swh]'): {exc}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class Archive:
    """A swh-storage served on 127.0.0.1, its journal in the test's broker."""

    url: str
    topic: str
    loader_config: Path

    def storage(self) -> Any:
        from swh.storage import get_storage

        return get_storage("remote", url=self.url)

    def visits(self, origin: str) -> list[Visit]:
        """The last status of each visit of ``origin``, in visit order."""
        storage = self.storage()
        found = []
        for visit in storage.origin_visit_get(origin, limit=1000).results:
            status = storage.origin_visit_status_get_latest(origin, visit.visit)
            found.append(Visit(visit.visit, status.status, status.snapshot, status.date))
        return found

    def finals(self, origin: str) -> list[Visit]:
        """The visits of ``origin`` that ended."""
        return [v for v in self.visits(origin) if v.status not in ("created", "ongoing")]


@dataclass(frozen=True)
class Visit:
    """A visit as the archive has it."""

    number: int
    status: str
    snapshot: bytes | None
    date: datetime


@pytest.fixture
def archive(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Archive]:
    """The archive's storage server, its journal writer feeding revisit's journal topic;
    the loaders' config (``SWH_CONFIG_FILENAME``) exported for the worker."""
    _archive_packages()
    prefix = f"archive-{uuid.uuid4().hex[:8]}"
    with embedded.archive_storage(tmp_path, settings.kafka_brokers, prefix) as loader_config:
        topic = f"{prefix}.origin_visit_status"
        monkeypatch.setenv("REVISIT_JOURNAL_TOPIC", topic)
        monkeypatch.setenv("SWH_CONFIG_FILENAME", str(loader_config))
        url = json.loads(loader_config.read_text())["storage"]["url"]
        yield Archive(url, topic, loader_config)


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory of git repositories served over (dumb) http on 127.0.0.1: its path
    and base URL. The suite's REVISIT_ALLOWED_INTERNAL_HOSTS allows 127.0.0.1."""
    root = tmp_path / "forge"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _publish(repo: Path) -> None:
    """Make ``repo``'s refs visible to dumb http clients."""
    git(repo, "update-server-info")


def _new_repo(root: Path, base: str, name: str) -> str:
    make_repo(root / name)
    _publish(root / name)
    return f"{base}/{name}/.git"


def _loader(conn: DictConnection, visit_type: str, loader: str) -> None:
    conn.execute("update visit_types set loader = %s where name = %s", (loader, visit_type))


def test_the_archives_git_loader_visits_and_revisits_stats_equal_the_archives_statuses(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    archive: Archive,
    forge: tuple[Path, str],
    tmp_path: Path,
) -> None:
    root, base = forge
    kept, changed, deleted = (_new_repo(root, base, n) for n in ("kept", "changed", "deleted"))
    _loader(conn, "git", "swh-git")
    list_origins(conn, ctx, [kept, changed, deleted])
    logs = tmp_path / "logs"
    logs.mkdir()
    env = with_constants(FAST, {"REVISIT_LADDER_UNIT_S": "1"})
    journal = {"journal": PROCESSES["journal"]}
    visiting = {name: PROCESSES[name] for name in ("scheduler", "worker")}
    finals = archive.finals
    with running(journal, env, logs), running(visiting, env, logs):
        wait_for(lambda: all(finals(u) for u in (kept, changed, deleted)), 40, "visits", logs)
        first = {u: finals(u)[0] for u in (kept, changed, deleted)}
        assert all(v.status == "full" and v.snapshot is not None for v in first.values())
        commit(root / "changed", "new work")
        _publish(root / "changed")
        shutil.rmtree(root / "deleted")
        wait_for(
            lambda: (
                any(v.snapshot != first[changed].snapshot for v in finals(changed))
                and any(v.status == "not_found" for v in finals(deleted))
                and len(finals(kept)) >= 2
            ),
            40,
            "an eventful revisit, a not_found and an uneventful revisit",
            logs,
        )
        request = create_request(conn, RequestVisit(url=kept, visit_type="git"))
        wait_for(
            lambda: get_request(conn, request)["status"] in ("succeeded", "failed"), 30, "", logs
        )
    # The workers stopped: the journal client has folded all the archive published.
    with running(journal, env, logs):
        wait_for(lambda: _agree(conn, archive), 20, "revisit's stats to match the archive", logs)
    done = get_request(conn, request)
    assert done["status"] == "succeeded"
    row = conn.execute("select visit from visit_requests where id = %s", (request,)).fetchone()
    assert row is not None
    own = [v for v in finals(kept) if v.number == row["visit"]]
    assert own[0].status == "full"
    assert done["finished_at"] == own[0].date
    snapshot = archive.storage().snapshot_get_branches(first[changed].snapshot)
    assert snapshot is not None and b"HEAD" in snapshot["branches"]
    shown = cli("origin", "show", changed).stdout
    assert f"swh:1:snp:{finals(changed)[-1].snapshot.hex()}" in shown
    assert "Traceback" not in (logs / "worker.log").read_text()


def _agree(conn: DictConnection, archive: Archive) -> bool:
    """Whether every origin's stats say what the archive's statuses say."""
    for url, row in stats_by_url(conn).items():
        visits = archive.finals(url)
        if not visits:
            return False
        eventful = uneventful = failed = 0
        last_snapshot = None
        for _, status, snapshot, _ in ((v.number, v.status, v.snapshot, v.date) for v in visits):
            if status in ("full", "partial"):
                if snapshot is not None and snapshot != last_snapshot:
                    eventful += 1
                else:
                    uneventful += 1
                last_snapshot = snapshot if snapshot is not None else last_snapshot
            else:
                failed += 1
        expected = {
            "last_visit_number": visits[-1].number,
            "last_visit_status": visits[-1].status,
            "last_snapshot": last_snapshot,
            "eventful_visits": eventful,
            "uneventful_visits": uneventful,
            "failed_visits": failed,
        }
        got = {k: row[k] for k in expected}
        if got != expected:
            return False
    return True


def test_a_storage_that_is_down_fails_the_visit_with_a_short_reason_and_the_origin_comes_back(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    archive: Archive,
    forge: tuple[Path, str],
    tmp_path: Path,
) -> None:
    root, base = forge
    url = _new_repo(root, base, "repo")
    _loader(conn, "git", "swh-git")
    conn.execute("update visit_types set num_retries = 0 where name = 'git'")
    list_origins(conn, ctx, [url])
    # A visit the archive never sees: no journal status ends its request, the worker does.
    refused = create_request(conn, RequestVisit(url="svn://forge.example/r", visit_type="git"))
    config = archive.loader_config.read_text()
    down = f"http://127.0.0.1:{_free_port()}/"
    archive.loader_config.write_text(json.dumps({"storage": {"cls": "remote", "url": down}}))
    logs = tmp_path / "logs"
    logs.mkdir()
    env = with_constants(FAST, {"REVISIT_LADDER_UNIT_S": "1"})
    worker_log = logs / "worker.log"
    with running(PROCESSES, env, logs):
        wait_for(lambda: "StorageAPIError" in worker_log.read_text(), 30, "a failed visit", logs)
        # The archive recorded nothing, so no one publishes a status: the scheduler
        # takes the origin back after its cooldown, and visits it once the storage is up.
        archive.loader_config.write_text(config)
        wait_for(lambda: bool(archive.finals(url)), 30, "a visit once the storage is up", logs)
        wait_for(lambda: _agree(conn, archive), 20, "revisit's stats to match the archive", logs)
        wait_for(lambda: get_request(conn, refused)["status"] == "failed", 10, "refused", logs)
    reason = "url: scheme 'svn' not allowed (file, git, http, https)"
    assert get_request(conn, refused)["failure_reason"] == reason
    failed = [line for line in worker_log.read_text().splitlines() if "StorageAPIError" in line]
    assert f"visited {url} in the express lane: failed in" in failed[0]
    assert all(len(line) < 700 for line in failed)
    assert "Traceback" not in worker_log.read_text()


def test_a_repository_that_hangs_is_killed_at_the_time_limit_and_closed_failed_in_the_archive(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    archive: Archive,
    forge: tuple[Path, str],
    tmp_path: Path,
) -> None:
    root, base = forge
    url = _new_repo(root, base, "repo")
    with socket.socket() as hanging:  # accepts connections (backlog), never answers
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(16)
        stuck = f"http://127.0.0.1:{hanging.getsockname()[1]}/stuck.git"
        _loader(conn, "git", "swh-git")
        conn.execute("update visit_types set time_limit = '3 seconds' where name = 'git'")
        list_origins(conn, ctx, [url, stuck])
        logs = tmp_path / "logs"
        logs.mkdir()
        worker_log = logs / "worker.log"
        env = with_constants(
            FAST, {"REVISIT_LADDER_UNIT_S": "2", "REVISIT_EXPRESS_TIME_LIMIT_S": "3"}
        )
        with running(PROCESSES, env, logs):
            wait_for(
                lambda: (
                    "slow lane time limit (3s)" in worker_log.read_text()
                    and len(archive.finals(stuck)) >= 2
                    and len(archive.finals(url)) >= 2
                ),
                60,
                "the hanging visit to be closed failed in both lanes, the other origin visited on",
                logs,
            )
            wait_for(lambda: _agree(conn, archive), 20, "revisit's stats to match", logs)
    stats = stats_by_url(conn)[stuck]
    assert stats["last_visit_status"] == "failed"
    assert stats["eventful_visits"] == stats["uneventful_visits"] == 0
    # The express visit killed at its limit and the slow lane's are each one
    # archive visit, closed failed there: counted once each, by the archive's journal.
    statuses = [v.status for v in archive.finals(stuck)]
    assert len(statuses) >= 2 and set(statuses) == {"failed"}
    log = worker_log.read_text()
    assert f"{stuck} outlasted the express lane" in log
    assert "Traceback" not in log


def _hg(repo: Path, *args: str) -> None:
    hg = shutil.which("hg", path=str(Path(sys.executable).parent)) or "hg"
    subprocess.run([hg, "--cwd", str(repo), *args], check=True, capture_output=True)


def _hg_commit(repo: Path, message: str) -> None:
    with (repo / "CHANGES").open("a") as f:
        f.write(f"{message}\n")
    _hg(repo, "commit", "-q", "-A", "-u", "test", "-m", message)


#: ``visit_twice(url, visit_type, change)``.
VisitTwice = Callable[[str, str, Callable[[], None]], None]


@pytest.fixture
def visit_twice(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    archive: Archive,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> VisitTwice:
    """Serve a visit type with the archive's loader and check that an origin is
    visited, then revisited eventfully after ``change``, and that revisit's stats
    then match the archive's visits."""
    return functools.partial(_visit_twice, conn, ctx, archive, tmp_path, monkeypatch)


def _visit_twice(
    conn: DictConnection,
    ctx: Context,
    archive: Archive,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    visit_type: str,
    change: Callable[[], None],
) -> None:
    monkeypatch.setenv("REVISIT_WORKER_VISIT_TYPES_ALLOW", f'["{visit_type}"]')
    _loader(conn, visit_type, f"swh-{visit_type}")
    list_origins(conn, ctx, [url], visit_type=visit_type)
    logs = tmp_path / "logs"
    logs.mkdir()
    env = with_constants(FAST, {"REVISIT_LADDER_UNIT_S": "1"})
    journal = {"journal": PROCESSES["journal"]}
    visiting = {name: PROCESSES[name] for name in ("scheduler", "worker")}
    with running(journal, env, logs), running(visiting, env, logs):
        wait_for(lambda: bool(archive.finals(url)), 40, "a first visit", logs)
        first = archive.finals(url)[0]
        change()
        wait_for(
            lambda: any(v.snapshot != first.snapshot for v in archive.finals(url)),
            40,
            "an eventful revisit",
            logs,
        )
    with running(journal, env, logs):
        wait_for(lambda: _agree(conn, archive), 20, "revisit's stats to match the archive", logs)
    assert first.status == "full"
    assert stats_by_url(conn)[url]["eventful_visits"] == 2


def test_the_archives_mercurial_loader_visits_a_local_repository_and_sees_its_commits(
    tmp_path: Path, visit_twice: VisitTwice
) -> None:
    repo = tmp_path / "hg" / "repo"
    repo.mkdir(parents=True)
    _hg(repo, "init")
    _hg_commit(repo, "one")
    visit_twice(repo.as_uri(), "hg", lambda: _hg_commit(repo, "two"))


def svn_tools() -> None:
    """Skip (fail under CI) when Subversion's programs or the archive's svn loader are missing."""
    tools = ("svn", "svnadmin", "svnmucc", "svnrdump", "svnserve")
    missing = [tool for tool in tools if not shutil.which(tool)]
    try:
        import swh.loader.svn  # noqa: F401
    except ImportError:
        missing.append("swh.loader.svn")
    if missing:
        message = f"svn needs {', '.join(missing)} (scripts/setup installs them)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def _svn_commit(url: str, tmp_path: Path, message: str) -> None:
    change = tmp_path / "svn-change"
    change.write_text(f"{message}\n")
    subprocess.run(
        ["svnmucc", "-m", message, "put", str(change), f"{url}/trunk/{message}"],
        check=True,
        capture_output=True,
    )


def test_the_archives_svn_loader_visits_a_local_repository_and_sees_its_commits(
    tmp_path: Path, visit_twice: VisitTwice
) -> None:
    svn_tools()
    repo = tmp_path / "svn" / "repo"
    repo.parent.mkdir()
    subprocess.run(["svnadmin", "create", str(repo)], check=True)
    url = repo.as_uri()
    subprocess.run(["svnmucc", "-m", "layout", "mkdir", f"{url}/trunk"], check=True)
    _svn_commit(url, tmp_path, "one")
    visit_twice(url, "svn", lambda: _svn_commit(url, tmp_path, "two"))
