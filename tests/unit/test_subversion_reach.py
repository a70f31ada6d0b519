"""What Subversion may reach from an archive visit's child, by URL
(``app.loaders.subversion``): the proxy's reading of a request, the URL checks
and the pinning of ``svnrdump``'s ``svn://`` host. No DNS asked, no connection."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.loaders.subversion import Reach, _target, pinned_url

#: A public address (none is connected to); TEST-NET ranges count as internal.
PUBLIC = "93.184.216.34"


def _answering(address: str, asked: list[str] | None = None) -> Reach:
    def resolve(host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        if asked is not None:
            asked.append(host)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port or 0))]

    return Reach(resolve)


@pytest.mark.parametrize(
    ("head", "target"),
    [
        (b"CONNECT svn.example:443 HTTP/1.1\r\nHost: svn.example\r\n\r\n", ("svn.example", 443)),
        (b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", ("::1", 8443)),
        (b"OPTIONS http://svn.example/repo HTTP/1.1\r\n\r\n", ("svn.example", 80)),
        (b"PROPFIND http://127.0.0.2:8080/r HTTP/1.1\r\n\r\n", ("127.0.0.2", 8080)),
    ],
)
def test_the_proxy_reads_the_host_and_port_a_request_names(
    head: bytes, target: tuple[str, int]
) -> None:
    assert _target(head)[1:] == target


@pytest.mark.parametrize(
    "head",
    [
        b"GET /repo HTTP/1.1\r\n\r\n",
        b"GET ftp://x/ HTTP/1.1\r\n\r\n",
        b"CONNECT x HTTP/1.1\r\n\r\n",
    ],
)
def test_the_proxy_refuses_a_request_naming_no_http_host(head: bytes) -> None:
    with pytest.raises(ValueError):
        _target(head)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("svn://forge.example/repo", "resolves to a loopback address (127.0.0.2)"),
        ("svn://127.0.0.2/repo", "loopback"),
        ("svn+ssh://forge.example/repo", "scheme 'svn+ssh' not allowed"),
        ("git://forge.example/repo", "scheme 'git' not allowed"),
    ],
)
def test_subversion_is_refused_a_url_leading_inside(url: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        _answering("127.0.0.2").check(url)


def test_http_urls_are_left_to_the_proxy_unresolved() -> None:
    asked: list[str] = []
    _answering("127.0.0.2", asked).check("https://forge.example/repo")
    assert asked == []


def test_file_urls_are_reached_only_under_the_loaders_directories(
    tmp_path: Path, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts(["127.0.0.1"])  # not localhost: file:// refused by the rules
    reach = Reach(local_roots=[str(tmp_path / "work")])
    reach.check((tmp_path / "work" / "mounted" / "repo").as_uri())
    for outside in ("/srv/repo", f"{tmp_path}/work/../secret", f"{tmp_path}/workshop"):
        with pytest.raises(ValueError, match="localhost"):
            reach.check(f"file://{outside}")


@pytest.mark.parametrize(
    ("address", "url", "pinned"),
    [
        (PUBLIC, "svn://forge.example:3690/r", f"svn://{PUBLIC}:3690/r"),
        (PUBLIC, "svn://forge.example/r/trunk", f"svn://{PUBLIC}/r/trunk"),
        ("2a00:1450::7", "svn://forge.example/r", "svn://[2a00:1450::7]/r"),
        (PUBLIC, "https://forge.example/r", "https://forge.example/r"),
        (PUBLIC, "-r0:5", "-r0:5"),
    ],
)
def test_svnrdump_is_given_the_checked_address_of_an_svn_host(
    address: str, url: str, pinned: str
) -> None:
    assert pinned_url(url, _answering(address)) == pinned


def test_svnrdump_is_refused_an_svn_host_resolving_inside() -> None:
    with pytest.raises(ValueError, match="loopback"):
        pinned_url("svn://forge.example/r", _answering("127.0.0.2"))
