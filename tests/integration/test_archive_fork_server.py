"""The archive's loaders' visits are forked by one fork server per worker process
(``app.loaders.zygote``): it is started again when it dies, serves several
threads at once, and a visit's whole process group is killed at its limit and
when the worker shuts down. swh-loader-git visits git repositories served over
http on 127.0.0.1 into a ``memory`` swh-storage of each child's own."""

from __future__ import annotations

import functools
import http.server
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.db.connection import DictConnection
from app.devtools.demo import git, make_repo
from app.loaders import archive
from app.loaders.archive import ArchiveGitLoader
from app.loaders.base import VisitResult
from app.loaders.zygote import ForkServer
from app.services.context import Context
from app.settings import Settings
from tests.integration.helpers import list_origins
from tests.processes import running, wait_for, with_constants


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def repos(tmp_path: Path) -> Iterator[list[str]]:
    """Two git repositories served over (dumb) http on 127.0.0.1."""
    root = tmp_path / "forge"
    for name in ("a", "b"):
        make_repo(root / name)
        git(root / name, "update-server-info")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield [f"http://127.0.0.1:{server.server_address[1]}/{n}/.git" for n in ("a", "b")]
    server.shutdown()
    server.server_close()


@pytest.fixture
def hanging() -> Iterator[str]:
    """A URL whose server accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/stuck.git"


def _children(server: ForkServer) -> list[psutil.Process]:
    pid = server.pid()
    return psutil.Process(pid).children(recursive=True) if pid else []


def test_visits_are_forked_by_one_server_which_is_started_again_when_it_dies(
    fork_server: ForkServer, repos: list[str]
) -> None:
    loader = ArchiveGitLoader()
    assert loader.load(repos[0], {}, 60).status == "full"
    first = fork_server.pid()
    assert loader.load(repos[1], {}, 60).status == "full"
    assert fork_server.pid() == first is not None
    os.kill(first, signal.SIGKILL)
    psutil.Process(first).wait(5)
    result = loader.load(repos[0], {}, 60)
    assert result.status == "full" and result.snapshot is not None
    assert fork_server.pid() not in (None, first)


def test_visits_from_several_threads_at_once_each_get_their_own_outcome(
    fork_server: ForkServer, repos: list[str]
) -> None:
    results: list[VisitResult] = []

    def visit(url: str) -> None:
        results.append(ArchiveGitLoader().load(url, {}, 60))

    threads = [threading.Thread(target=visit, args=(repos[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status for r in results] == ["full"] * 6
    # Each child has a memory storage of its own: each visit is its origin's first.
    assert all(r.archived and r.snapshot is not None for r in results)


def test_a_hanging_visit_is_killed_with_its_process_group_at_its_limit(
    fork_server: ForkServer, hanging: str
) -> None:
    results: list[VisitResult] = []
    thread = threading.Thread(
        target=lambda: results.append(ArchiveGitLoader().load(hanging, {}, 3))
    )
    thread.start()
    thread.join(60)  # the server never answers: only the limit ends the visit
    assert not thread.is_alive(), "the visit outlived its limit"
    assert results[0].status == "failed" and results[0].timed_out
    wait_for(lambda: not _children(fork_server), 30, "the killed visit's processes to go")


def test_a_visit_given_up_before_its_child_started_leaves_no_child_running(
    fork_server: ForkServer, hanging: str
) -> None:
    # The fork server starts with the first visit and takes longer than 0.1 s to
    # preload: the worker closes the child's socket before the child's setsid.
    result = ArchiveGitLoader().load(hanging, {}, 0.1)
    assert result.status == "failed" and result.timed_out
    wait_for(lambda: fork_server.pid() is not None, 30, "the fork server")
    time.sleep(3)  # the zygote forks the request it was sent, then sees it closed
    wait_for(lambda: not _children(fork_server), 30, "the given-up visit's child to go")


def test_stopping_the_children_ends_a_running_visit_and_starts_no_other(
    fork_server: ForkServer, hanging: str
) -> None:
    results: list[VisitResult] = []
    thread = threading.Thread(
        target=lambda: results.append(ArchiveGitLoader().load(hanging, {}, 120))
    )
    thread.start()
    wait_for(lambda: bool(_children(fork_server)), 20, "the visit's child")
    archive.stop_children()
    thread.join(15)
    assert not thread.is_alive()
    assert results[0].status == "failed" and not results[0].timed_out
    assert results[0].error == "stopped: the worker is shutting down"
    refused = ArchiveGitLoader().load(hanging, {}, 120)
    assert refused.error == "the worker is shutting down" and refused.transient
    wait_for(lambda: not _children(fork_server), 30, "the stopped visit's processes to go")


def test_a_worker_stopped_with_sigterm_kills_its_running_visit_and_exits(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    fork_server: ForkServer,
    hanging: str,
    tmp_path: Path,
) -> None:
    conn.execute("update visit_types set loader = 'swh-git' where name = 'git'")
    list_origins(conn, ctx, [hanging])
    logs = tmp_path / "logs"
    logs.mkdir()
    env = with_constants(
        {"actors.scheduler.POLL_INTERVAL_S": 0.2}, {"REVISIT_EXPRESS_TIME_LIMIT_S": "120"}
    )
    processes = {
        "scheduler": ["revisit", "scheduler"],
        "worker": ["revisit", "worker", "--lane", "all", "--threads", "1"],
    }
    with running(processes, env, logs) as procs:
        worker = psutil.Process(procs["worker"].pid)

        def visiting() -> list[psutil.Process]:
            return [
                p
                for p in worker.children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE and os.getsid(p.pid) == p.pid
            ]

        wait_for(lambda: bool(visiting()), 40, "the visit's child", logs)
        descendants = worker.children(recursive=True)
        stopping = time.monotonic()
        # Dramatiq's main process forwards one SIGTERM to its worker processes,
        # which finish their messages: the visit would hold it to its limit.
        worker.send_signal(signal.SIGTERM)
        procs["worker"].wait(20)
        stopped_s = time.monotonic() - stopping
    assert stopped_s < 15
    assert procs["worker"].returncode == 0
    # The visit's child, the fork server and the worker processes are all gone.
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in descendants)
    log = (logs / "worker.log").read_text()
    assert "stopped: the worker is shutting down" in log
