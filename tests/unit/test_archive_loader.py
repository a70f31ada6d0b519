"""The archive's loader plugins refuse what they must not visit before starting
anything, and a missing configuration is a failed visit naming the variable."""

from collections.abc import Iterator

import pytest

from app.loaders.archive import (
    PLUGINS,
    ArchiveGitLoader,
    ArchiveHgLoader,
    ArchiveLoader,
    _loader_class,
    _short,
)
from app.loaders.base import get_loader, publishes_statuses
from app.settings import get_settings
from tests.conftest import IN_CI


@pytest.fixture
def schemes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("REVISIT_ALLOWED_INTERNAL_HOSTS", "[]")
    monkeypatch.setenv("SWH_CONFIG_FILENAME", "/nonexistent/loader.yml")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("schemes")
def test_swh_git_refuses_a_scheme_not_allowed_and_local_paths_without_running_a_loader() -> None:
    for url, reason in (
        ("svn://h.example/r", "scheme 'svn' not allowed"),
        ("/etc", "must start with a scheme"),
        ("file:///etc", "not visited unless REVISIT_ALLOWED_INTERNAL_HOSTS allows it"),
        ("http://127.0.0.1:6379/", "not visited unless REVISIT_ALLOWED_INTERNAL_HOSTS allows it"),
    ):
        result = ArchiveGitLoader().load(url, {}, 10)
        assert result.status == "failed"
        assert result.error is not None and result.error.startswith("url: ")
        assert reason in result.error
        assert result.duration_s == 0.0


@pytest.mark.usefixtures("schemes")
def test_swh_hg_refuses_local_paths_unless_localhost_is_allowed() -> None:
    result = ArchiveHgLoader().load("file:///srv/hg/repo", {}, 10)
    assert result.error is not None
    assert "names localhost (file://)" in result.error


def test_a_missing_archive_config_fails_the_visit_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SWH_CONFIG_FILENAME", raising=False)
    result = ArchiveHgLoader().load("https://h.example/repo", {}, 10)
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("SWH_CONFIG_FILENAME: not set")


def test_the_archives_loaders_leave_the_statuses_to_the_archive_and_revisits_publish_them() -> None:
    assert not publishes_statuses("swh-git") and not publishes_statuses("swh-hg")
    assert publishes_statuses("git") and publishes_statuses("simulated")
    assert publishes_statuses("not-installed")  # its failures are the worker's to publish
    assert get_loader("git", "swh-git").publishes_statuses is False


def test_a_reason_is_one_line_without_the_traceback_an_exception_carries() -> None:
    error = "NotFound: ('/r', '/tmp/x', 'Traceback (most recent call last):\\n  File ...')"
    assert _short(error) == "NotFound: ('/r', '/tmp/x"
    assert _short("boom\nsecond line") == "boom"
    assert _short(None) is None


@pytest.mark.parametrize(
    ("plugin", "module", "name"),
    [
        ("swh-git", "swh.loader.git.loader", "GitLoader"),
        ("swh-hg", "swh.loader.mercurial.loader", "HgLoader"),
        ("swh-svn", "swh.loader.svn.loader", "SvnLoaderFromRemoteDump"),
        ("swh-git-checkout", "swh.loader.git.directory", "GitCheckoutLoader"),
        ("swh-hg-checkout", "swh.loader.mercurial.directory", "HgCheckoutLoader"),
        ("swh-svn-export", "swh.loader.svn.directory", "SvnExportLoader"),
        ("swh-tarball-directory", "swh.loader.core.loader", "TarballDirectoryLoader"),
    ],
)
def test_each_archive_plugin_resolves_to_the_archives_loader_class(
    plugin: str, module: str, name: str
) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        if IN_CI:
            raise
        pytest.skip(f"the archive's package is not installed: {exc}")
    loader = get_loader(plugin.removeprefix("swh-"), plugin)
    assert isinstance(loader, ArchiveLoader) and not loader.publishes_statuses
    found = _loader_class(loader.swh_worker)
    assert (found.__module__, found.__name__) == (module, name)


def test_every_archive_plugin_of_the_table_is_an_installed_entry_point() -> None:
    for name, (worker, schemes) in PLUGINS.items():
        loader = get_loader(name)
        assert isinstance(loader, ArchiveLoader)
        assert (loader.swh_worker, loader.schemes) == (worker, schemes)
