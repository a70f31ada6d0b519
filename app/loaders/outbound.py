"""The connections an archive's loader may open from its visit's child process.

The archive's loaders connect by themselves, through HTTP clients that follow
redirects to any host (urllib3 under dulwich, requests, urllib, mercurial's
own) and resolve names again. In the child, every TCP connection is held to
the URL rules (``app.inputs.rules``) by the address it goes to, whatever led
there: an internal address REVISIT_ALLOWED_INTERNAL_HOSTS does not allow (by
address or network) is refused before connecting. Exempt are the visited
URL's own addresses (checked before the child started), the services the
archive's loader configuration names (its storage, a database, Kafka brokers)
and the environment's HTTP proxies. Programs the loaders run (``git`` for the
checkout loader, Subversion's C library) are not held to it.
"""

from __future__ import annotations

import re
import socket
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies

from app.inputs.rules import check_addresses, strings_in
from app.loaders.git import resolved_addresses, url_scheme

#: ``host:port`` (a Kafka broker), the host an IPv6 literal in brackets.
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$")
#: libpq's ``host=`` in a key/value connection string (several, comma separated).
_LIBPQ_HOST = re.compile(r"(?:^|\s)host\s*=\s*([^\s']+)")
#: The families whose connections are checked (a Unix socket is no visit).
_INET = (socket.AF_INET, socket.AF_INET6)


def hold_connections_to_rules(url: str, config: Any) -> None:
    """From now on in this process, refuse (ValueError) a TCP connection to an
    internal address not allowed, but to the addresses of the visited ``url``
    (held to the rules), of the services the loader's ``config`` names and of
    the HTTP proxies the environment names (``https_proxy``...: what lies behind
    a proxy is the proxy's to hold)."""
    try:
        visited = resolved_addresses(url, url_scheme(url))
    except OSError:  # a name that stopped resolving is the loader's to report
        visited = []
    exempt = set(visited) | _service_addresses([config, list(getproxies().values())])
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family in _INET and str(address[0]) not in exempt:
            check_addresses(str(address[0]), [str(address[0])])

    def checked(self: socket.socket, address: Any) -> None:
        check(self, address)
        connect(self, address)

    def checked_ex(self: socket.socket, address: Any) -> int:
        check(self, address)
        return connect_ex(self, address)

    socket.socket.connect = checked  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = checked_ex  # type: ignore[method-assign,assignment]


def _service_addresses(config: Any) -> set[str]:
    """The addresses of the hosts ``config`` names: in URLs of any scheme (an HTTP
    storage, a database), ``host:port`` pairs (Kafka brokers) and libpq's ``host=``."""
    found: set[str] = set()
    for host in {h for text in strings_in(config) for h in _hosts_in(text)}:
        with suppress(OSError, ValueError, UnicodeError):
            found |= {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    return found


def _hosts_in(text: str) -> list[str]:
    """The host names or addresses a configuration string names, if any."""
    if "://" in text:
        with suppress(ValueError):
            return [h] if (h := urlsplit(text).hostname) else []
        return []
    if (pair := _HOST_PORT.match(text)) is not None:
        return [pair.group(1).strip("[]")]
    return [h for match in _LIBPQ_HOST.findall(text) for h in match.split(",") if h]
