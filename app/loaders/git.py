"""The git loader: lists the remote's refs and derives a snapshot id from them."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar
from urllib.parse import urljoin, urlsplit

from app.inputs.rules import address, check_addresses, check_url, url_host, without_userinfo
from app.loaders.base import VisitResult

#: The transports the git loader visits (``file`` only where
#: REVISIT_ALLOWED_INTERNAL_HOSTS allows ``localhost``, by the URL rules).
SCHEMES = frozenset({"https", "http", "git", "file"})
#: Each scheme's port when the URL names none.
DEFAULT_PORTS = {"https": 443, "http": 80, "git": 9418}
#: Resolves a host and port to addresses (socket.getaddrinfo's signature).
Resolver = Callable[..., Sequence[tuple[Any, ...]]]

#: Most redirects a visit follows (git's own default follows at most 20).
MAX_REDIRECTS = 5
#: What git ``ls-remote`` first asks a smart or dumb HTTP server, after the URL.
REFS_PATH = "/info/refs?service=git-upload-pack"
#: git's error for a redirect it was told not to follow (``http.followRedirects=false``).
REDIRECTED = re.compile(r"The requested URL returned error: 30[12378]\b")

#: ``[user@]host:path``, git's scp-like syntax for ssh.
HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
SCP_LIKE = re.compile(r"^(?:[^@/:]+@)?[^/:]+:(?!//)")

TRANSIENT_HINTS = (
    "could not resolve host",
    "connection refused",
    "connection timed out",
    "connection reset",
    "temporary failure",
    "early eof",
    "the remote end hung up",
)
NOT_FOUND_HINTS = (
    "does not appear to be a git repository",
    "repository not found",
    "not found",
    "no such file or directory",
)


def snapshot_id(ls_remote_output: str) -> bytes:
    """A 20-byte id of the set of refs: equal refs give equal ids, any change a new one."""
    lines = sorted(line.strip() for line in ls_remote_output.splitlines() if line.strip())
    return hashlib.sha1("\n".join(lines).encode(), usedforsecurity=False).digest()


def url_scheme(url: str) -> str:
    """The transport git would use for ``url``: its scheme, ``ssh`` for the scp-like
    ``host:path`` form, ``file`` for a local path."""
    if "://" in url:
        return urlsplit(url).scheme.lower()
    if HELPER.match(url):  # <transport>::<address>, a remote helper
        return url.split("::", 1)[0].lower()
    if SCP_LIKE.match(url):
        return "ssh"
    return "file"


class GitLoader:
    """Visits git origins with ``git ls-remote`` (refs only, no object transfer).

    Every visit obeys the URL rules (app.inputs.rules) again, so a URL stored
    before them is held to them too, and a host name is resolved first: a
    visit is refused, before any connection, when the name resolves to an
    internal address REVISIT_ALLOWED_INTERNAL_HOSTS does not allow, and git's
    HTTP transport is pinned to the addresses checked (``http.curloptResolve``)
    so a second resolution cannot answer otherwise. git itself is held to the
    loader's schemes (``GIT_ALLOW_PROTOCOL``) and follows no HTTP redirect: the
    loader reads the redirect's target and visits it as a new URL, held to the
    same rules before any connection to it.
    """

    publishes_statuses: ClassVar[bool] = True

    def __init__(self, resolve: Resolver | None = None) -> None:
        self.resolve = resolve

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Visit ``url``: a timeout or git error is failed, a missing repository not_found,
        a URL the rules or the loader's schemes refuse failed without running git.

        git follows no redirect: the loader asks where one leads, holds the new URL
        to the same rules and runs git on it, at most MAX_REDIRECTS times."""
        started = time.monotonic()
        for hop in range(MAX_REDIRECTS + 1):
            checked = self._checked(url, hop, started)
            if isinstance(checked, VisitResult):
                return checked
            result = self._ls_remote(url, checked, started + timeout_s - time.monotonic())
            if not (url_scheme(url) in ("http", "https") and REDIRECTED.search(result.error or "")):
                return result
            try:
                location = redirect_location(url, checked, started + timeout_s - time.monotonic())
            except (OSError, http.client.HTTPException) as exc:
                return VisitResult(
                    "failed", None, time.monotonic() - started, f"redirect: {exc}", True
                )
            except ValueError as exc:
                return VisitResult("failed", None, time.monotonic() - started, f"url: {exc}")
            if location is None:  # no longer redirected: git's own failure
                return result
            url = location
        return VisitResult(
            "failed",
            None,
            time.monotonic() - started,
            f"url: more than {MAX_REDIRECTS} redirects (the last to {without_userinfo(url)})",
        )

    def _checked(self, url: str, hop: int, started: float) -> list[str] | VisitResult:
        """The addresses the host of ``url`` resolves to (none for a literal), or the
        failed visit when the loader or the URL rules refuse it; ``hop`` redirects
        led to ``url``, which then must be http or https."""
        scheme = url_scheme(url)
        schemes = SCHEMES if hop == 0 else frozenset({"http", "https"})
        try:
            if scheme not in schemes:
                raise ValueError(f"scheme {scheme!r} not allowed ({', '.join(sorted(schemes))})")
            check_url(url)
            return resolved_addresses(url, scheme, self.resolve)
        except ValueError as exc:
            message = str(exc).removeprefix("url: ")
            if hop:
                message = f"redirect {hop} to {without_userinfo(url)}: {message}"
            return VisitResult("failed", None, time.monotonic() - started, f"url: {message}")
        except OSError as exc:  # the name does not resolve (now)
            return VisitResult(
                "failed", None, time.monotonic() - started, f"could not resolve host: {exc}", True
            )

    def _ls_remote(self, url: str, addresses: list[str], timeout_s: float) -> VisitResult:
        """``git ls-remote`` of ``url``, pinned to ``addresses``, following no redirect."""
        started = time.monotonic()
        scheme = url_scheme(url)
        env = {
            **os.environ,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
            # file only for a file:// URL the rules let through, never reached otherwise.
            "GIT_ALLOW_PROTOCOL": "file" if scheme == "file" else "git:http:https",
        }
        pinned = [("http.followRedirects", "false"), *pinning(url, addresses)]
        options = [arg for key, value in pinned for arg in ("-c", f"{key}={value}")]
        try:
            proc = subprocess.run(
                ["git", *options, "ls-remote", "--", url],
                capture_output=True,
                text=True,
                timeout=max(timeout_s, 0.01),
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return VisitResult(
                "failed", None, time.monotonic() - started, "timeout", timed_out=True
            )
        duration = time.monotonic() - started
        if proc.returncode != 0:
            message = proc.stderr.strip()
            lowered = message.lower()
            if any(h in lowered for h in TRANSIENT_HINTS):
                return VisitResult("failed", None, duration, message[-500:], True)
            status = "not_found" if any(h in lowered for h in NOT_FOUND_HINTS) else "failed"
            return VisitResult(status, None, duration, message[-500:])
        return VisitResult("full", snapshot_id(proc.stdout), duration)


def pinning(url: str, addresses: Sequence[str]) -> list[tuple[str, str]]:
    """git's settings that pin the host of ``url`` to its checked ``addresses``
    (none for an address literal): curl's resolution for ``http`` and ``https``
    (``http.curloptResolve``), the URL itself for ``git`` (``url.<base>.insteadOf``:
    the daemon sees the address as the host it serves)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not addresses:
        return []
    port = parts.port or DEFAULT_PORTS[scheme]
    if scheme == "git":
        first = host_literal(addresses[0])
        return [(f"url.git://{first}:{port}.insteadOf", f"git://{parts.netloc}")]
    listed = ",".join(host_literal(a) for a in addresses)
    return [("http.curloptResolve", f"{url_host(parts.netloc)}:{port}:{listed}")]


def host_literal(address: str) -> str:
    """An address as a URL names it: an IPv6 one in brackets."""
    return f"[{address}]" if ":" in address else address


def redirect_location(url: str, addresses: Sequence[str], timeout_s: float) -> str | None:
    """Where the HTTP server of ``url`` redirects git's first request, asked once at
    the checked ``addresses`` (the host's literal when none) without following it;
    None when it answers no redirect. The new URL is the Location without git's
    path, as git reads it: ValueError when the Location does not end with it."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), url_host(parts.netloc)
    port = parts.port or DEFAULT_PORTS[scheme]
    asked = parts.path.rstrip("/") + REFS_PATH
    sock = socket.create_connection(
        (addresses[0] if addresses else host.strip("[]"), port), timeout=max(timeout_s, 0.01)
    )
    try:
        if scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPConnection(host, port, timeout=max(timeout_s, 0.01))
        conn.sock = sock  # connected to the checked address, not resolved again
        conn.request("GET", asked, headers={"User-Agent": "git/revisit"})
        response = conn.getresponse()
        location = response.getheader("Location")
    finally:
        sock.close()
    if response.status not in (301, 302, 303, 307, 308) or not location:
        return None
    target = urljoin(f"{scheme}://{parts.netloc}{asked}", location)
    if not target.endswith(REFS_PATH):
        raise ValueError(f"redirect to {without_userinfo(target)} does not keep git's path")
    return target[: -len(REFS_PATH)]


def resolved_addresses(url: str, scheme: str, resolve: Resolver | None = None) -> list[str]:
    """The addresses the host of ``url`` resolves to (by ``resolve``, else by
    ``socket.getaddrinfo`` as it is when called, so a stub of it is used), after
    refusing (ValueError) an internal one REVISIT_ALLOWED_INTERNAL_HOSTS does not
    allow; none for an address literal (check_url judged it) or a file URL.
    OSError when the name does not resolve."""
    if scheme == "file":
        return []
    parts = urlsplit(url)
    host = url_host(parts.netloc)
    if not host or address(host) is not None:
        return []
    port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    answers = (resolve or socket.getaddrinfo)(host, port, proto=socket.IPPROTO_TCP)
    found = sorted({str(info[4][0]) for info in answers})
    check_addresses(host, found)
    return found
