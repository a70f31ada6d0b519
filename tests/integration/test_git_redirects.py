"""The git loaders follow an HTTP redirect only to a URL the URL rules allow, and
connect to no internal address a redirect names: git repositories served over
(dumb) http by servers on loopback addresses, REVISIT_ALLOWED_INTERNAL_HOSTS
allowing 127.0.0.1 only (127.0.0.2 stands for the inside of the network)."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.devtools.demo import git, make_repo
from app.loaders.archive import ArchiveGitCheckoutLoader, ArchiveGitLoader, ArchiveLoader
from app.loaders.git import MAX_REDIRECTS, GitLoader
from app.loaders.outbound import (
    hold_connections_to_rules,
    hold_git_subprocesses,
    service_addresses,
    service_hosts,
)
from app.loaders.zygote import ForkServer
from tests.processes import wait_for


class _Forge(http.server.SimpleHTTPRequestHandler):
    """Serves its directory, but answers the paths under a redirect's prefix with
    that redirect, the rest of the path kept; records every path asked."""

    redirects: dict[str, tuple[int, str]]
    asked: list[str]

    def do_GET(self) -> None:
        self.asked.append(self.path)
        for prefix, (status, target) in self.redirects.items():
            if self.path.startswith(prefix):
                self.send_response(status)
                self.send_header("Location", target + self.path[len(prefix) :])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


Serve = Callable[[str, dict[str, tuple[int, str]]], tuple[str, list[str]]]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Start a forge on a loopback address with its redirects: its base URL and the
    paths it was asked."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(host: str, redirects: dict[str, tuple[int, str]]) -> tuple[str, list[str]]:
        asked: list[str] = []
        handler = type("Forge", (_Forge,), {"redirects": redirects, "asked": asked})
        server = http.server.ThreadingHTTPServer(
            (host, 0), functools.partial(handler, directory=str(tmp_path))
        )
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://{host}:{server.server_address[1]}", asked

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The addresses this process connects to (the loader's own requests)."""
    made: list[tuple[str, int]] = []
    create = socket.create_connection

    def record(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        made.append(address)
        return create(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", record)
    return made


def test_redirects_to_allowed_urls_are_followed_to_the_repository(
    tmp_path: Path, serve: Serve, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts(["127.0.0.1"])
    make_repo(tmp_path / "repo")
    git(tmp_path / "repo", "update-server-info")
    redirects: dict[str, tuple[int, str]] = {}
    base, asked = serve("127.0.0.1", redirects)
    redirects["/old/"] = (302, "/moved/")
    redirects["/moved/"] = (301, f"{base}/repo/.git/")
    direct = GitLoader().load(f"{base}/repo/.git", {}, 30)
    moved = GitLoader().load(f"{base}/old", {}, 30)
    assert direct.status == "full"
    assert (moved.status, moved.snapshot) == ("full", direct.snapshot)
    assert "/moved/info/refs?service=git-upload-pack" in asked


@pytest.mark.parametrize(
    ("target", "refusal"),
    [
        ("http://127.0.0.2:{port}/x.git/", "URL names a loopback address (127.0.0.2)"),
        (
            "http://169.254.169.254/latest/x.git/",
            "URL names a link-local address (169.254.169.254)",
        ),
        ("http://10.0.0.1/x.git/", "URL names a private address (10.0.0.1)"),
        (
            "http://forge.example/x.git/",
            "host forge.example resolves to a private address (10.0.0.7)",
        ),
    ],
)
def test_a_redirect_to_an_internal_address_is_refused_before_any_connection_to_it(
    target: str,
    refusal: str,
    serve: Serve,
    connections: list[tuple[str, int]],
    internal_hosts: Callable[[list[str]], None],
) -> None:
    internal_hosts(["127.0.0.1"])
    inside, inside_asked = serve("127.0.0.2", {})
    target = target.format(port=inside.rpartition(":")[2])
    base, asked = serve("127.0.0.1", {"/a.git/": (301, target)})

    def resolve(host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, 1, 6, "", ("10.0.0.7", port))]

    result = GitLoader(resolve).load(f"{base}/a.git", {}, 30)
    hop = target.removesuffix("/")
    assert (result.status, result.error) == (
        "failed",
        f"url: redirect 1 to {hop}: {refusal}, which is not visited unless "
        "REVISIT_ALLOWED_INTERNAL_HOSTS allows it",
    )
    assert not result.transient
    assert inside_asked == []
    assert {host for host, _ in connections} == {"127.0.0.1"}
    assert asked == ["/a.git/info/refs?service=git-upload-pack"] * 2  # git, then the loader


def test_a_redirect_loop_fails_the_visit_naming_the_last_hop(
    serve: Serve, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts(["127.0.0.1"])
    redirects: dict[str, tuple[int, str]] = {}
    base, asked = serve("127.0.0.1", redirects)
    redirects["/loop/"] = (307, f"{base}/loop/")
    result = GitLoader().load(f"{base}/loop", {}, 30)
    assert (result.status, result.error) == (
        "failed",
        f"url: more than {MAX_REDIRECTS} redirects (the last to {base}/loop)",
    )
    assert len(asked) == 2 * (MAX_REDIRECTS + 1)


def test_the_archives_git_loader_follows_a_redirect_to_an_allowed_url(
    tmp_path: Path, serve: Serve, fork_server: ForkServer
) -> None:
    make_repo(tmp_path / "repo")
    git(tmp_path / "repo", "update-server-info")
    redirects: dict[str, tuple[int, str]] = {}
    base, asked = serve("127.0.0.1", redirects)
    redirects["/old/"] = (301, f"{base}/repo/.git/")
    result = ArchiveGitLoader().load(f"{base}/old", {}, 60)
    assert (result.status, result.error) == ("full", None)
    assert "/repo/.git/info/refs?service=git-upload-pack" in asked


@pytest.mark.parametrize(
    ("loader", "arguments", "reason"),
    [
        (ArchiveGitLoader, {}, "resolves to a loopback address (127.0.0.2)"),
        # swh's checkout runs git with an environment of its own ({"LC_ALL": "C"}).
        (ArchiveGitCheckoutLoader, {"ref": "main", "checksums": {}}, "non-zero exit status"),
    ],
)
def test_the_archives_git_loaders_connect_to_no_internal_address_a_redirect_names(
    loader: Callable[[], ArchiveLoader],
    arguments: dict[str, Any],
    reason: str,
    tmp_path: Path,
    serve: Serve,
    fork_server: ForkServer,
) -> None:
    make_repo(tmp_path / "repo")
    git(tmp_path / "repo", "update-server-info")
    inside, inside_asked = serve("127.0.0.2", {})  # loopback, not allowed
    base, asked = serve("127.0.0.1", {"/a.git/": (302, f"{inside}/repo/.git/")})
    direct = loader().load(f"{base}/repo/.git", arguments, 60)
    result = loader().load(f"{base}/a.git", arguments, 60)
    assert (direct.status, direct.error) == ("full", None)
    assert result.status == "failed"
    assert reason in (result.error or "")
    assert "/a.git/info/refs?service=git-upload-pack" in asked
    assert inside_asked == []


def test_the_archives_git_checkout_fetches_no_submodule_its_repository_names(
    tmp_path: Path, serve: Serve, fork_server: ForkServer
) -> None:
    make_repo(tmp_path / "sub")
    git(tmp_path / "sub", "update-server-info")
    inside, inside_asked = serve("127.0.0.2", {})  # loopback, not allowed
    make_repo(tmp_path / "repo")
    git(tmp_path / "repo", "submodule", "add", "-q", f"{inside}/sub/.git", "sub")
    git(tmp_path / "repo", "commit", "-q", "-m", "a submodule inside")
    git(tmp_path / "repo", "update-server-info")
    inside_asked.clear()
    base, _ = serve("127.0.0.1", {})
    arguments = {"ref": "main", "checksums": {}, "submodules": True}
    result = ArchiveGitCheckoutLoader().load(f"{base}/repo/.git", arguments, 60)
    assert result.status == "failed"
    assert inside_asked == []


@pytest.fixture
def git_daemon(tmp_path: Path) -> Iterator[str]:
    """git's own daemon serving ``tmp_path`` on 127.0.0.1: its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            f"--base-path={tmp_path}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(tmp_path),
        ],
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, 30, "git daemon listening")
    yield f"git://127.0.0.1:{port}"
    daemon.terminate()
    daemon.wait()


@pytest.mark.parametrize("scheme", ["http", "git"])
def test_a_git_run_with_an_environment_of_its_own_is_pinned_to_the_checked_addresses(
    scheme: str, tmp_path: Path, serve: Serve, guarded: None, request: pytest.FixtureRequest
) -> None:
    make_repo(tmp_path / "repo")
    git(tmp_path / "repo", "update-server-info")
    base = serve("127.0.0.1", {})[0] if scheme == "http" else request.getfixturevalue("git_daemon")
    url = base.replace("127.0.0.1", "forge.invalid") + "/repo/.git"  # a name DNS never answers
    hold_git_subprocesses(url, ["127.0.0.1"])
    proc = subprocess.run(
        [shutil.which("git") or "git", "ls-remote", url],
        env={"LC_ALL": "C"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert "refs/heads/main" in proc.stdout


def test_the_git_loader_visits_a_git_url_at_the_address_it_checked(
    tmp_path: Path, git_daemon: str, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts(["127.0.0.1"])
    make_repo(tmp_path / "repo")

    def resolve(host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, 1, 6, "", ("127.0.0.1", port))]

    url = git_daemon.replace("127.0.0.1", "forge.invalid") + "/repo/.git"  # no DNS answer
    result = GitLoader(resolve).load(url, {}, 30)
    assert (result.status, result.error) == ("full", None)


def test_a_git_run_for_a_host_that_did_not_resolve_when_checked_fetches_nothing(
    tmp_path: Path, serve: Serve, guarded: None
) -> None:
    make_repo(tmp_path / "repo")
    git(tmp_path / "repo", "update-server-info")
    base, asked = serve("127.0.0.1", {})
    hold_git_subprocesses(base.replace("127.0.0.1", "forge.invalid"), None)
    proc = subprocess.run(
        ["git", "ls-remote", f"{base}/repo/.git"], capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    assert "transport 'http' not allowed" in proc.stderr
    assert asked == []


@pytest.mark.parametrize(
    ("config", "proxy", "reached"),
    [
        ({"storage": {"cls": "memory"}}, None, False),
        ({"storage": {"cls": "remote", "url": "http://127.0.0.2:{port}/"}}, None, True),
        ({"storage": {"cls": "memory"}}, "http://127.0.0.2:{port}", True),
        (
            {"storage": {"cls": "memory", "journal_writer": {"brokers": ["127.0.0.2:{port}"]}}},
            None,
            True,
        ),
        ({"storage": {"cls": "postgresql", "db": "host=127.0.0.2 port={port}"}}, None, True),
        ({"storage": {"cls": "postgresql", "db": "postgresql://127.0.0.2:{port}/x"}}, None, True),
    ],
)
def test_an_archive_visit_connects_inside_only_to_its_configured_services_and_proxy(
    config: dict[str, Any],
    proxy: str | None,
    reached: bool,
    serve: Serve,
    guarded: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inside, _ = serve("127.0.0.2", {})
    port = int(inside.rpartition(":")[2])
    config = json.loads(json.dumps(config).replace("{port}", str(port)))
    if proxy is not None:
        monkeypatch.setenv("https_proxy", proxy.format(port=port))
    hold_connections_to_rules("http://127.0.0.1:1/x.git", config)  # a literal: no DNS
    with socket.socket() as sock:
        if reached:
            sock.connect(("127.0.0.2", port))
        else:
            with pytest.raises(ValueError, match=r"127\.0\.0\.2 .*loopback address"):
                sock.connect(("127.0.0.2", port))
    with socket.socket() as sock, pytest.raises(ValueError, match="private address"):
        sock.connect_ex(("10.0.0.1", 80))


def test_a_service_that_moved_since_the_fork_server_resolved_it_is_still_reached(
    serve: Serve, guarded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved, _ = serve("127.0.0.2", {})
    port = int(moved.rpartition(":")[2])
    config = {"storage": {"cls": "remote", "url": f"http://storage.example:{port}/"}}
    answer = {"storage.example": "127.0.0.3"}

    def resolve(host: str, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    service_addresses(service_hosts(config))  # the fork server's preload
    answer["storage.example"] = "127.0.0.2"  # the storage restarted elsewhere
    hold_connections_to_rules("http://127.0.0.1:1/x.git", config)
    with socket.socket() as sock:
        sock.connect(("127.0.0.2", port))
    with socket.socket() as sock, pytest.raises(ValueError, match="loopback address"):
        sock.connect(("127.0.0.4", port))
