"""A lister of a directory of git repositories (a forge on local disk, as the demo's).

Arguments: ``path`` (the directory, required: absolute, an existing directory,
neither the filesystem root nor a repository itself), ``visit_type`` (default git),
``max_depth`` (how deep repositories may be nested, default 3), ``page_size``
(origins per page, default 1000). Each repository (a ``.git`` folder, or a
bare repository: ``HEAD`` beside ``objects``) is listed as its ``file://``
URL, with ``last_update`` = the newest change of its refs (a commit or a push
rewrites one), so revisit sees which repositories changed without visiting.

A full listing reports every repository; an incremental one only those
changed since the newest ``last_update`` of the previous run (the state
``{"last_update": ISO date}``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.inputs.listing import ListedOriginIn
from app.listers.plugin import ListedPage, ListerRequest, refuse_unknown_arguments

#: The arguments it takes (``--arg NAME=VALUE``) and their defaults.
ARGUMENTS: dict[str, Any] = {"path": None, "visit_type": "git", "max_depth": 3, "page_size": 1000}


def _git_dir(path: Path) -> Path | None:
    if (path / ".git" / "HEAD").is_file():
        return path / ".git"
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return path
    return None


def find_repositories(root: Path, max_depth: int) -> Iterator[tuple[Path, Path]]:
    """(repository, its git directory) under ``root``, in name order, not descending
    into repositories."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False) or entry.name.startswith("."):
            continue
        path = Path(entry.path)
        git_dir = _git_dir(path)
        if git_dir is not None:
            yield path, git_dir
        elif max_depth > 1:
            yield from find_repositories(path, max_depth - 1)


def last_change(git_dir: Path) -> datetime:
    """The newest modification of the repository's refs (HEAD, refs/, packed-refs)."""
    newest = (git_dir / "HEAD").stat().st_mtime
    packed = git_dir / "packed-refs"
    if packed.exists():
        newest = max(newest, packed.stat().st_mtime)
    for folder, _, files in os.walk(git_dir / "refs"):
        for name in files:
            newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime)
    return datetime.fromtimestamp(newest, tz=UTC)


def _argument(arguments: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = arguments.get(name, default)
    if value is None or not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise ValueError(f"{name}: expected {kind.__name__}, got {value!r}")
    return value


def _root(text: str) -> Path:
    """The directory to walk: walking ``/`` would list every repository of the
    machine, a repository itself lists nothing (and a full listing would then
    disable every origin), a relative path depends on the worker's directory."""
    root = Path(text)
    if not root.is_absolute():
        raise ValueError(f"path: {text!r} is relative; give an absolute path")
    if not root.is_dir():
        raise ValueError(f"path: {root} is not a directory")
    if root.resolve() == Path(root.anchor):
        raise ValueError(f"path: {root} is the filesystem root; give a directory of repositories")
    if _git_dir(root) is not None:
        raise ValueError(
            f"path: {root} is a git repository; give the directory that holds repositories"
        )
    return root


def _parse(arguments: Mapping[str, Any]) -> tuple[Path, str, int, int]:
    """(path, visit_type, max_depth, page_size), or ValueError naming the argument."""
    refuse_unknown_arguments(arguments, ARGUMENTS)
    given = dict(arguments)
    root = _root(_argument(given, "path", str, None))
    visit_type = _argument(given, "visit_type", str, ARGUMENTS["visit_type"])
    max_depth = _argument(given, "max_depth", int, ARGUMENTS["max_depth"])
    page_size = _argument(given, "page_size", int, ARGUMENTS["page_size"])
    for name, number in (("max_depth", max_depth), ("page_size", page_size)):
        if number < 1:
            raise ValueError(f"{name}: expected at least 1, got {number}")
    return root, visit_type, max_depth, page_size


class GitDirectoryLister:
    """Lists the git repositories of a local directory (``revisit.listers``: gitdir)."""

    def check_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Refuse an argument it does not take or a bad value, naming it."""
        _parse(arguments)

    def pages(self, request: ListerRequest) -> Iterator[ListedPage]:
        """Every repository (full) or those changed since the last run, page by page."""
        root, visit_type, max_depth, page_size = _parse(request.arguments)
        since_text = request.state.get("last_update")
        since = None if request.full or not since_text else datetime.fromisoformat(since_text)
        newest = since
        page: list[ListedOriginIn] = []
        for repo, git_dir in find_repositories(root, max_depth):
            changed = last_change(git_dir)
            newest = changed if newest is None else max(newest, changed)
            if since is None or changed > since:
                origin = ListedOriginIn(
                    url=repo.as_uri(), visit_type=visit_type, last_update=changed
                )
                page.append(origin)
            if len(page) >= page_size:
                yield ListedPage(page, _state(newest))
                page = []
        yield ListedPage(page, _state(newest))


def _state(newest: datetime | None) -> dict[str, Any]:
    return {"last_update": newest.isoformat()} if newest else {}
