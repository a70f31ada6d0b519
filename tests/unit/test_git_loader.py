import subprocess
from pathlib import Path

import pytest

from app.devtools.demo import commit, make_repo
from app.loaders.git import GitLoader, snapshot_id, url_scheme

LOCAL = {"file"}  # the test repositories are on local disk


def test_snapshot_id_ignores_ref_order_and_sees_any_change() -> None:
    a = "1111\trefs/heads/main\n2222\trefs/tags/v1\n"
    b = "2222\trefs/tags/v1\n1111\trefs/heads/main\n"
    c = "1112\trefs/heads/main\n2222\trefs/tags/v1\n"
    assert snapshot_id(a) == snapshot_id(b) != snapshot_id(c)
    assert len(snapshot_id(a)) == 20


def test_git_loader_reports_new_snapshot_after_a_commit(tmp_path: Path) -> None:
    url = make_repo(tmp_path / "repo")
    loader = GitLoader(LOCAL)
    first = loader.load(url, {}, 10)
    same = loader.load(url, {}, 10)
    commit(tmp_path / "repo", "more")
    changed = loader.load(url, {}, 10)
    assert first.status == "full" and first.snapshot == same.snapshot
    assert changed.snapshot != first.snapshot


def test_git_loader_reports_missing_repository_as_not_found(tmp_path: Path) -> None:
    result = GitLoader(LOCAL).load((tmp_path / "nothing").as_uri(), {}, 10)
    assert result.status == "not_found"
    assert result.error


def test_git_loader_reports_a_timeout_as_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired(cmd="git", timeout=0.01)

    monkeypatch.setattr(subprocess, "run", slow)
    result = GitLoader(LOCAL).load("file:///x", {}, 0.01)
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


@pytest.mark.parametrize("url", ["file:///etc", "/etc", "git@example.org:a.git", "ext::sh"])
def test_git_loader_refuses_schemes_not_allowed_without_running_git(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise AssertionError("git must not run")

    monkeypatch.setattr(subprocess, "run", no_git)
    result = GitLoader(["https", "http", "git"]).load(url, {}, 10)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("url: scheme")
    assert not result.transient


def test_local_paths_are_refused_by_default(tmp_path: Path) -> None:
    url = make_repo(tmp_path / "repo")
    assert GitLoader().load(url, {}, 10).status == "failed"
    assert GitLoader(LOCAL).load(url, {}, 10).status == "full"
