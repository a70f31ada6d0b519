"""The connections an archive's loader may open from its visit's child process.

The archive's loaders connect by themselves, through HTTP clients that follow
redirects to any host (urllib3 under dulwich, requests, urllib, mercurial's
own) and resolve names again. In the child, every TCP connection is held to
the URL rules (``app.inputs.rules``) by the address it goes to, whatever led
there: an internal address REVISIT_ALLOWED_INTERNAL_HOSTS does not allow (by
address or network) is refused before connecting. Exempt are the visited
URL's own addresses (checked before the child started, and again in it), the
services the archive's loader configuration names (its storage, a database,
Kafka brokers) and the environment's HTTP proxies, these resolved once by the
fork server for all its children (again by a child that meets an address they
do not know). The programs the loaders start (``git`` for the checkout loader)
are not seen by this check: the same rule holds them below the process
(``app.loaders.below``), git also by its configuration
(``hold_git_subprocesses``), Subversion's C library and ``svnrdump`` also by
their own (``app.loaders.subversion``).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies

from app.inputs.rules import check_addresses, strings_in
from app.loaders.below import Check
from app.loaders.git import pinning, resolved_addresses, url_scheme

#: ``host:port`` (a Kafka broker), the host an IPv6 literal in brackets.
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$")
#: libpq's ``host=`` in a key/value connection string (several, comma separated).
_LIBPQ_HOST = re.compile(r"(?:^|\s)host\s*=\s*([^\s']+)")
#: Shortest time between two resolutions of the services in a visit.
RESOLVE_AGAIN_S = 5.0
#: The families whose connections are checked (a Unix socket is no visit).
_INET = (socket.AF_INET, socket.AF_INET6)


def hold_connections_to_rules(url: str, config: Any) -> Check:
    """From now on in this process, refuse (ValueError) a TCP connection to an
    internal address not allowed, but to the addresses of the visited ``url``
    (held to the rules), of the services the loader's ``config`` names and of
    the HTTP proxies the environment names (``https_proxy``...: what lies behind
    a proxy is the proxy's to hold); hold the git it runs to the addresses of
    ``url`` (``hold_git_subprocesses``). Returns the rule, for
    ``app.loaders.below`` to hold what connects from C and the programs started."""
    visited: list[str] | None = None
    with suppress(OSError):  # a name that stopped resolving is the loader's to report
        visited = resolved_addresses(url, url_scheme(url))
    hold_git_subprocesses(url, visited)
    services = service_hosts(config)
    exempt = set(visited or ()) | service_addresses(services)

    resolved_at = [-RESOLVE_AGAIN_S]  # the first refusal asks at once

    def check(host: str, port: int = 0) -> None:
        if host in exempt:
            return
        try:
            check_addresses(host, [host])
        except ValueError:
            # A service may have moved since the fork server resolved it (asked
            # again at most every RESOLVE_AGAIN_S: a slow DNS holds every call).
            if time.monotonic() - resolved_at[0] >= RESOLVE_AGAIN_S:
                resolved_at[0] = time.monotonic()
                exempt.update(_resolve(services))
            if host not in exempt:
                raise

    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def checked(self: socket.socket, address: Any) -> None:
        if self.family in _INET:
            check(str(address[0]))
        connect(self, address)

    def checked_ex(self: socket.socket, address: Any) -> int:
        if self.family in _INET:
            check(str(address[0]))
        return connect_ex(self, address)

    socket.socket.connect = checked  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = checked_ex  # type: ignore[method-assign,assignment]
    return check


def hold_git_subprocesses(url: str, addresses: Sequence[str] | None) -> None:
    """From now on in this process, every program started through ``subprocess``,
    whatever environment its caller passes, runs git (if it does) following no
    HTTP redirect, pinned to the checked ``addresses`` of the host of ``url``
    (``app.loaders.git.pinning``) and fetching from no URL but those its caller
    names (a submodule's URL, taken from the repository, is refused). With
    ``addresses`` None (the host did not resolve when checked), git fetches nothing."""
    settings = [("http.followRedirects", "false"), ("protocol.allow", "user")]
    if addresses is None:
        settings[1] = ("protocol.allow", "never")
    else:
        settings += pinning(url, addresses)

    def with_settings(arguments: dict[str, Any]) -> None:
        env = arguments.get("env")
        arguments["env"] = with_git_config(os.environ if env is None else env, settings)

    rewrite_popen(with_settings)


def rewrite_popen(rewrite: Callable[[dict[str, Any]], None]) -> None:
    """From now on in this process, every program started through ``subprocess``
    starts with the arguments of ``Popen`` (by name: ``args``, ``env``...) as
    ``rewrite`` changes them in place; another hold wraps this one."""
    init = subprocess.Popen.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)  # its signature stays Popen's, were it held again
    def held(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        rewrite(bound.arguments)
        init(*bound.args, **bound.kwargs)

    subprocess.Popen.__init__ = held  # type: ignore[method-assign]


def with_git_config(env: Mapping[Any, Any], settings: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``env`` with git's ``settings`` added after the ones it carries
    (``GIT_CONFIG_COUNT``...: above every configuration file), less
    ``GIT_ALLOW_PROTOCOL``, which would overrule ``protocol.allow``."""
    merged = {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
    merged.pop("GIT_ALLOW_PROTOCOL", None)
    count = merged.get("GIT_CONFIG_COUNT", "")
    first = int(count) if count.isdigit() else 0
    for n, (key, value) in enumerate(settings, start=first):
        merged[f"GIT_CONFIG_KEY_{n}"] = key
        merged[f"GIT_CONFIG_VALUE_{n}"] = value
    merged["GIT_CONFIG_COUNT"] = str(first + len(settings))
    return merged


def service_hosts(config: Any) -> frozenset[str]:
    """The hosts the loader's ``config`` and the environment's HTTP proxies name: in
    URLs of any scheme (an HTTP storage, a database), ``host:port`` pairs (Kafka
    brokers) and libpq's ``host=``."""
    texts = strings_in([config, list(getproxies().values())])
    return frozenset(host for text in texts for host in _hosts_in(text))


@functools.cache
def service_addresses(hosts: frozenset[str]) -> frozenset[str]:
    """The addresses ``hosts`` resolve to, resolved once per process: the fork
    server's preload resolves its configuration's, and its children inherit them."""
    return _resolve(hosts)


def _resolve(hosts: frozenset[str]) -> frozenset[str]:
    found: set[str] = set()
    for host in hosts:
        with suppress(OSError, ValueError, UnicodeError):
            found |= {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    return frozenset(found)


def _hosts_in(text: str) -> list[str]:
    """The host names or addresses a configuration string names, if any."""
    if "://" in text:
        with suppress(ValueError):
            return [h] if (h := urlsplit(text).hostname) else []
        return []
    if (pair := _HOST_PORT.match(text)) is not None:
        return [pair.group(1).strip("[]")]
    return [h for match in _LIBPQ_HOST.findall(text) for h in match.split(",") if h]
