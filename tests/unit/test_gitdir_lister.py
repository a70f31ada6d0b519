import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.listers.gitdir import GitDirectoryLister
from app.listers.plugin import ListerRequest, get_lister_plugin

NOW = datetime(2026, 7, 1, tzinfo=UTC)


def fake_repo(path: Path, changed_at: float, bare: bool = False) -> Path:
    git_dir = path if bare else path / ".git"
    (git_dir / "refs" / "heads").mkdir(parents=True)
    (git_dir / "objects").mkdir()
    for file in (git_dir / "HEAD", git_dir / "refs" / "heads" / "main"):
        file.write_text("ref: refs/heads/main\n")
        os.utime(file, (changed_at, changed_at))
    return path


def urls(request: ListerRequest) -> list[list[str]]:
    return [[o.url for o in page.origins] for page in GitDirectoryLister().pages(request)]


def test_every_repository_is_listed_with_its_last_ref_change_in_pages(tmp_path: Path) -> None:
    a = fake_repo(tmp_path / "a", 1_000_000)
    b = fake_repo(tmp_path / "group" / "b.git", 2_000_000, bare=True)
    c = fake_repo(tmp_path / "group" / "c", 3_000_000)
    (tmp_path / "not-a-repo").mkdir()
    request = ListerRequest({"path": str(tmp_path), "page_size": 2}, {}, True, NOW)
    pages = list(GitDirectoryLister().pages(request))
    assert [[o.url for o in p.origins] for p in pages] == [[a.as_uri(), b.as_uri()], [c.as_uri()]]
    assert pages[0].origins[1].last_update == datetime.fromtimestamp(2_000_000, tz=UTC)
    assert pages[-1].state == {"last_update": datetime.fromtimestamp(3_000_000, tz=UTC).isoformat()}


def test_an_incremental_listing_reports_only_what_changed_since_the_last_run(
    tmp_path: Path,
) -> None:
    fake_repo(tmp_path / "old", 1_000_000)
    new = fake_repo(tmp_path / "new", 3_000_000)
    state = {"last_update": datetime.fromtimestamp(2_000_000, tz=UTC).isoformat()}
    assert urls(ListerRequest({"path": str(tmp_path)}, state, False, NOW)) == [[new.as_uri()]]
    assert len(urls(ListerRequest({"path": str(tmp_path)}, state, True, NOW))[0]) == 2


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        ({}, "path: expected str"),
        ({"path": "/no/such/dir"}, "path: /no/such/dir is not a directory"),
        ({"path": "relative/dir"}, "path: 'relative/dir' is relative"),
        ({"path": "/"}, "path: / is the filesystem root"),
        ({"path": "/.."}, "path: /.. is the filesystem root"),
        ({"path": "{tmp}", "max_depth": "2"}, "max_depth: expected int"),
        ({"path": "{tmp}", "page_size": 0}, "page_size: expected at least 1"),
        ({"path": "{tmp}/repo"}, "path: {tmp}/repo is a git repository; give the directory"),
        ({"path": "{tmp}", "pth": "x"}, "pth: no such argument (known: path, visit_type"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument_at_schedule_and_run_time(
    arguments: dict[str, object], refusal: str, tmp_path: Path
) -> None:
    fake_repo(tmp_path / "repo", 1_000_000)
    given = {k: str(v).format(tmp=tmp_path) if k == "path" else v for k, v in arguments.items()}
    expected = "^" + re.escape(refusal.format(tmp=tmp_path))
    with pytest.raises(ValueError, match=expected):
        GitDirectoryLister().check_arguments(given)
    with pytest.raises(ValueError, match=expected):
        list(GitDirectoryLister().pages(ListerRequest(given, {}, True, NOW)))


def test_the_directory_lister_is_installed_as_gitdir() -> None:
    assert isinstance(get_lister_plugin("gitdir"), GitDirectoryLister)
