"""Subversion reaches no internal address from an archive visit: the archive's svn
loader (in the fork server's child) and the ``svn``/``svnrdump`` programs under
the configuration that child gives them (``app.loaders.subversion``). Servers on
loopback addresses, REVISIT_ALLOWED_INTERNAL_HOSTS allowing 127.0.0.1 only
(127.0.0.2 stands for the inside of the network); a refused server counts the
connections it accepts."""

from __future__ import annotations

import http.server
import os
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.devtools.embedded import free_port
from app.loaders.archive import ArchiveSvnLoader
from app.loaders.subversion import MAX_EXTERNALS_DEPTH, Reach, subversion_held
from app.loaders.zygote import ForkServer
from tests.integration.test_archive_loaders import svn_tools
from tests.processes import wait_for
from tests.unit.test_below import Counting, run_held

REFUSED = "resolves to a loopback address (127.0.0.2)"


@pytest.fixture(autouse=True)
def _svn_tools() -> None:
    svn_tools()


@pytest.fixture
def inside() -> Iterator[Counting]:
    """A server on 127.0.0.2 counting the connections it accepts."""
    server = Counting("127.0.0.2")
    yield server
    server.close()


def _redirector(target: str) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1 that redirects every request to the same path under ``target``."""

    class Redirect(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.send_response(301)
            path = urlsplit(self.path).path  # absolute-form through a proxy
            self.send_header("Location", f"{target}{path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_OPTIONS = do_PROPFIND = do_REPORT = answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextmanager
def _redirecting(scheme: str, inside: Counting) -> Iterator[str]:
    """The URL of a repository on 127.0.0.1 whose server redirects every request
    to the same path on the refused server, an ``http`` or ``svn`` URL."""
    server = _redirector(f"{scheme}://127.0.0.2:{inside.port}")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/repo"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def redirecting(inside: Counting) -> Iterator[str]:
    with _redirecting("http", inside) as url:
        yield url


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    """subversion_held patches subprocess.Popen and subvertpy: restored after the test."""
    import subvertpy.client
    import subvertpy.ra

    monkeypatch.setattr(subprocess.Popen, "__init__", subprocess.Popen.__init__)
    monkeypatch.setattr(subvertpy.client, "Client", subvertpy.client.Client)
    monkeypatch.setattr(subvertpy.ra, "url_handlers", subvertpy.ra.url_handlers)


def _repository(root: Path, externals: str = "") -> str:
    """A repository on disk with one file in trunk, trunk's ``svn:externals`` set
    to ``externals``: its file:// URL (the tests allow localhost)."""
    repo = root / "repo"
    subprocess.run(["svnadmin", "create", str(repo)], check=True)
    url = repo.as_uri()
    (root / "file").write_text("content\n")
    command = ["svnmucc", "-m", "one", "mkdir", f"{url}/trunk"]
    command += ["put", str(root / "file"), f"{url}/trunk/file"]
    if externals:
        command += ["propset", "svn:externals", externals, f"{url}/trunk"]
    subprocess.run(command, check=True, capture_output=True)
    return url


@pytest.mark.parametrize("scheme", ["http", "svn"])
def test_the_archives_svn_loader_follows_no_redirect_to_an_internal_address(
    scheme: str, inside: Counting, fork_server: ForkServer
) -> None:
    with _redirecting(scheme, inside) as url:
        result = ArchiveSvnLoader().load(url, {}, 60)
    # The archive's loader takes a repository it cannot reach for one not found;
    # Subversion follows a redirect to svn:// itself, refused below the process.
    assert result.status in ("not_found", "failed")
    assert REFUSED in (result.error or "")
    assert inside.accepted == 0


@pytest.mark.parametrize("scheme", ["http", "svn"])
def test_the_archives_svn_loader_exports_no_external_on_an_internal_address(
    scheme: str, tmp_path: Path, inside: Counting, fork_server: ForkServer
) -> None:
    external = f"{scheme}://127.0.0.2:{inside.port}/repo/trunk outside"
    url = _repository(tmp_path, external)
    result = ArchiveSvnLoader().load(url, {}, 60)
    assert (result.status, result.error) == ("full", None)  # the external left out
    assert inside.accepted == 0


def test_the_archives_svn_loader_reaches_no_internal_address_through_externals_deeper_than_read(
    tmp_path: Path, svnserve: int, inside: Counting, fork_server: ForkServer
) -> None:
    # Externals are read MAX_EXTERNALS_DEPTH levels down before an export; the
    # chain's last link, deeper, is Subversion's own to fetch: held below it.
    link = f"svn://127.0.0.2:{inside.port}/repo/trunk inside"
    for level in range(MAX_EXTERNALS_DEPTH + 2, 0, -1):
        (tmp_path / f"level{level}").mkdir()
        _repository(tmp_path / f"level{level}", link)
        link = f"svn://127.0.0.1:{svnserve}/level{level}/repo/trunk level{level}"
    (tmp_path / "top").mkdir()
    url = _repository(tmp_path / "top", link)
    result = ArchiveSvnLoader().load(url, {}, 60)
    assert result.status in ("full", "partial", "failed"), result
    assert inside.accepted == 0


def test_an_svn_ssh_external_runs_no_ssh(
    tmp_path: Path, fork_server: ForkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ran = tmp_path / "ssh-ran"
    (bin_dir / "ssh").write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    url = _repository(tmp_path, "svn+ssh://127.0.0.2/repo/trunk outside")
    result = ArchiveSvnLoader().load(url, {}, 60)
    assert (result.status, result.error) == ("full", None)
    assert not ran.exists()


@pytest.fixture
def svnserve(tmp_path: Path) -> Iterator[int]:
    """svnserve on 127.0.0.1 serving ``tmp_path`` (its repository ``repo``): its port."""
    _repository(tmp_path)
    port = free_port()
    argv = ["svnserve", "-d", "--foreground", "--listen-host", "127.0.0.1"]
    server = subprocess.Popen([*argv, "--listen-port", str(port), "-r", str(tmp_path)])

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, 10, "svnserve")
        yield port
    finally:
        server.kill()
        server.wait()


def _answering(address: str) -> Reach:
    """What Subversion may reach, every name resolved to ``address`` (no DNS asked)."""

    def resolve(host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 0))]

    return Reach(resolve)


def test_svnrdump_reaches_an_svn_host_at_the_address_checked_for_it(
    svnserve: int, inside: Counting, held: None
) -> None:
    url = f"svn://forge.example:{svnserve}/repo"
    with subversion_held(_answering("127.0.0.1")):
        dumped = subprocess.run(["svnrdump", "dump", url], capture_output=True)
    assert dumped.returncode == 0, dumped.stderr  # forge.example has no DNS: pinned
    assert b"Node-path: trunk/file" in dumped.stdout
    with (
        subversion_held(_answering("127.0.0.2")),
        pytest.raises(ValueError, match=re.escape(REFUSED)),
    ):
        subprocess.run(["svnrdump", "dump", f"svn://forge.example:{inside.port}/repo"])
    assert inside.accepted == 0


def test_subversion_reaches_an_http_host_only_at_an_address_the_proxy_checked(
    redirecting: str, inside: Counting, held: None
) -> None:
    with subversion_held(_answering("127.0.0.2")) as proxy:
        asked = subprocess.run(
            ["svn", "info", "--non-interactive", f"http://forge.example:{inside.port}/repo"],
            capture_output=True,
            text=True,
        )
        redirected = subprocess.run(
            ["svn", "info", "--non-interactive", redirecting],
            capture_output=True,
            text=True,
        )
    assert asked.returncode != 0
    assert redirected.returncode != 0
    assert "forbidden" in asked.stderr
    assert len(proxy.refused) >= 2
    assert all(REFUSED in reason for reason in proxy.refused)
    assert inside.accepted == 0


def _export(url: str, to: Path) -> None:
    from subvertpy import client, ra

    auth = ra.Auth([ra.get_username_provider()])
    client.Client(auth=auth).export(url, str(to))


def test_an_export_fetches_its_externals_only_when_none_is_refused(
    svnserve: int, inside: Counting, held: None, tmp_path: Path
) -> None:
    allowed = f"svn://127.0.0.1:{svnserve}/repo/trunk allowed"
    refused = f"svn://127.0.0.2:{inside.port}/repo/trunk refused"
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "three").mkdir()
    one = _repository(tmp_path / "one", allowed)
    two = _repository(tmp_path / "two", f"{allowed}\n{refused}")
    # An allowed external whose own externals hold the refused one.
    three = _repository(tmp_path / "three", f"svn://127.0.0.1:{svnserve}/two/repo/trunk two")
    with subversion_held():
        for name, url in (("one", one), ("two", two), ("three", three)):
            _export(f"{url}/trunk", tmp_path / f"{name}-out")
    assert (tmp_path / "one-out" / "allowed" / "file").exists()
    assert (tmp_path / "two-out" / "file").exists()
    assert not (tmp_path / "two-out" / "allowed").exists()
    assert not (tmp_path / "three-out" / "two").exists()
    assert inside.accepted == 0


def test_an_export_takes_no_file_external_outside_the_loaders_directories(
    tmp_path: Path, held: None, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts(["127.0.0.1"])  # file:// is localhost's: refused but below local_roots
    (tmp_path / "work").mkdir()
    (tmp_path / "secret").mkdir()
    secret = _repository(tmp_path / "secret")
    inner = _repository(tmp_path / "work", f"{secret}/trunk secret")
    with subversion_held(Reach(local_roots=[str(tmp_path / "work")])):
        _export(f"{inner}/trunk", tmp_path / "work" / "out")
    assert (tmp_path / "work" / "out" / "file").exists()
    assert not (tmp_path / "work" / "out" / "secret").exists()


def test_subversion_resolving_a_name_itself_reaches_no_refused_address(svnserve: int) -> None:
    # The C library resolves localhost (127.0.0.1, ::1) after any check made in
    # Python: the filter below the process sees the address it connects to.
    unused, other = Counting("127.0.0.2"), Counting("127.0.0.3")
    try:
        result = run_held(
            f"""
            ran = subprocess.run(
                ["svn", "info", "--non-interactive", "svn://localhost:{svnserve}/repo"],
                capture_output=True, text=True,
            )
            result["svn"] = ran.returncode, ran.stderr
            """,
            unused,
            other,
            refuse=("127.0.0.1", "::1"),
        )
    finally:
        unused.close()
        other.close()
    assert result["svn"][0] != 0, result  # svnserve answers there, unheld
    assert f"127.0.0.1 is inside ({svnserve})" in result["refused"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_archives_svn_loader_visits_an_svn_url_under_the_held_configuration(
    host: str, svnserve: int, fork_server: ForkServer
) -> None:
    # svnrdump reaches localhost at its first checked address, 127.0.0.1.
    result = ArchiveSvnLoader().load(f"svn://{host}:{svnserve}/repo", {}, 60)
    assert (result.status, result.error) == ("full", None)
