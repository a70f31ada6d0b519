import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.devtools.demo import commit, make_repo
from app.loaders.git import GitLoader, resolved_addresses, snapshot_id, url_scheme


def test_snapshot_id_ignores_ref_order_and_sees_any_change() -> None:
    a = "1111\trefs/heads/main\n2222\trefs/tags/v1\n"
    b = "2222\trefs/tags/v1\n1111\trefs/heads/main\n"
    c = "1112\trefs/heads/main\n2222\trefs/tags/v1\n"
    assert snapshot_id(a) == snapshot_id(b) != snapshot_id(c)
    assert len(snapshot_id(a)) == 20


def test_git_loader_reports_new_snapshot_after_a_commit(tmp_path: Path) -> None:
    url = make_repo(tmp_path / "repo")
    loader = GitLoader()
    first = loader.load(url, {}, 10)
    same = loader.load(url, {}, 10)
    commit(tmp_path / "repo", "more")
    changed = loader.load(url, {}, 10)
    assert first.status == "full" and first.snapshot == same.snapshot
    assert changed.snapshot != first.snapshot


def test_git_loader_reports_missing_repository_as_not_found(tmp_path: Path) -> None:
    result = GitLoader().load((tmp_path / "nothing").as_uri(), {}, 10)
    assert result.status == "not_found"
    assert result.error


def test_git_loader_reports_a_timeout_as_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired(cmd="git", timeout=0.01)

    monkeypatch.setattr(subprocess, "run", slow)
    result = GitLoader().load("file:///x", {}, 0.01)
    assert (result.status, result.error, result.timed_out) == ("failed", "timeout", True)


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("https://example.org/a.git", "https"),
        ("FILE:///etc", "file"),
        ("/srv/git/a.git", "file"),
        ("../a.git", "file"),
        ("git@example.org:a/b.git", "ssh"),
        ("example.org:a.git", "ssh"),
        ("ext::sh -c touch% /tmp/pwned", "ext"),
    ],
)
def test_url_scheme_is_the_transport_git_would_use(url: str, scheme: str) -> None:
    assert url_scheme(url) == scheme


@pytest.mark.parametrize("url", ["/etc", "git@example.org:a.git", "ext::sh", "ssh://h/x"])
def test_git_loader_refuses_schemes_it_does_not_visit_without_running_git(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise AssertionError("git must not run")

    monkeypatch.setattr(subprocess, "run", no_git)
    result = GitLoader().load(url, {}, 10)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("url: ") and "scheme" in result.error
    assert not result.transient


def test_local_repositories_are_visited_only_where_localhost_is_allowed(
    tmp_path: Path, internal_hosts: Callable[[list[str]], None]
) -> None:
    url = make_repo(tmp_path / "repo")
    internal_hosts([])
    refused = GitLoader().load(url, {}, 10)
    assert (refused.status, refused.error) == (
        "failed",
        "url: URL names localhost (file://), which is not visited unless "
        "REVISIT_ALLOWED_INTERNAL_HOSTS allows it",
    )
    internal_hosts(["localhost"])
    assert GitLoader().load(url, {}, 10).status == "full"


def resolver(*addresses: str) -> Callable[..., list[tuple[Any, ...]]]:
    """A getaddrinfo answering ``addresses`` for any host, recording what it was asked."""

    def resolve(host: str, port: int, **kwargs: Any) -> list[tuple[Any, ...]]:
        asked.append((host, port))
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, 1, 6, "", (a, port))
            for a in addresses
        ]

    asked: list[tuple[str, int]] = []
    resolve.asked = asked  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(
    "found", [["127.0.0.1"], ["140.82.121.3", "10.0.0.7"], ["::ffff:169.254.169.254"]]
)
def test_a_host_resolving_to_an_internal_address_is_refused_before_any_connection(
    found: list[str], monkeypatch: pytest.MonkeyPatch, internal_hosts: Callable[[list[str]], None]
) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise AssertionError("git must not run")

    internal_hosts([])
    monkeypatch.setattr(subprocess, "run", no_git)
    resolve = resolver(*found)
    result = GitLoader(resolve).load("https://forge.example:8443/a.git", {}, 10)
    assert resolve.asked == [("forge.example", 8443)]  # type: ignore[attr-defined]
    assert result.status == "failed" and not result.transient
    assert result.error is not None
    assert result.error.startswith("url: host forge.example resolves to")


def test_git_is_pinned_to_the_public_addresses_checked_and_follows_no_redirect(
    monkeypatch: pytest.MonkeyPatch, internal_hosts: Callable[[list[str]], None]
) -> None:
    ran: list[list[str]] = []

    def fake_git(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "1111\trefs/heads/main\n", "")

    internal_hosts([])
    monkeypatch.setattr(subprocess, "run", fake_git)
    resolve = resolver("140.82.121.3", "2606:50c0:8000::153")
    assert GitLoader(resolve).load("https://forge.example/a.git", {}, 10).status == "full"
    assert ran == [
        [
            "git",
            "-c",
            "http.followRedirects=false",
            "-c",
            "http.curloptResolve=forge.example:443:140.82.121.3,[2606:50c0:8000::153]",
            "ls-remote",
            "--",
            "https://forge.example/a.git",
        ]
    ]


def test_a_host_that_does_not_resolve_fails_as_transient(
    internal_hosts: Callable[[list[str]], None],
) -> None:
    def unknown(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    internal_hosts([])
    result = GitLoader(unknown).load("https://nowhere.example/a.git", {}, 10)
    assert result.status == "failed" and result.transient


def test_the_addresses_are_resolved_by_socket_getaddrinfo_as_it_is_when_called(
    monkeypatch: pytest.MonkeyPatch, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts([])
    resolve = resolver("140.82.121.3")
    monkeypatch.setattr(socket, "getaddrinfo", resolve)

    assert resolved_addresses("https://forge.example/a.git", "https") == ["140.82.121.3"]
    assert resolve.asked == [("forge.example", 443)]  # type: ignore[attr-defined]
    monkeypatch.setattr(socket, "getaddrinfo", resolver("10.0.0.7"))
    refused = GitLoader().load("https://forge.example/a.git", {}, 10).error
    assert refused is not None and refused.startswith("url: host forge.example resolves to")
