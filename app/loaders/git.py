"""The git loader: lists the remote's refs and derives a snapshot id from them."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

from app.inputs.rules import address, check_addresses, check_url, url_host
from app.loaders.base import VisitResult

#: The transports the git loader visits (``file`` only where
#: REVISIT_ALLOWED_INTERNAL_HOSTS allows ``localhost``, by the URL rules).
SCHEMES = frozenset({"https", "http", "git", "file"})
#: Each scheme's port when the URL names none.
DEFAULT_PORTS = {"https": 443, "http": 80, "git": 9418}
#: Resolves a host and port to addresses (socket.getaddrinfo's signature).
Resolver = Callable[..., Sequence[tuple[Any, ...]]]

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
    loader's schemes (``GIT_ALLOW_PROTOCOL``), which also covers redirects.
    """

    publishes_statuses: ClassVar[bool] = True

    def __init__(self, resolve: Resolver = socket.getaddrinfo) -> None:
        self.resolve = resolve

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Visit ``url``: a timeout or git error is failed, a missing repository not_found,
        a URL the rules or the loader's schemes refuse failed without running git."""
        started = time.monotonic()
        scheme = url_scheme(url)
        if scheme not in SCHEMES:
            allowed = ", ".join(sorted(SCHEMES))
            return VisitResult(
                "failed", None, 0.0, f"url: scheme {scheme!r} not allowed ({allowed})"
            )
        try:
            check_url(url)
            pinned = self._resolved(url, scheme)
        except ValueError as exc:
            message = str(exc)
            return VisitResult(
                "failed", None, 0.0, message if message[:5] == "url: " else f"url: {message}"
            )
        except OSError as exc:  # the name does not resolve (now)
            return VisitResult(
                "failed", None, time.monotonic() - started, f"could not resolve host: {exc}", True
            )
        env = {
            **os.environ,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
            # file only for a file:// URL the rules let through, never reached otherwise.
            "GIT_ALLOW_PROTOCOL": "file" if scheme == "file" else "git:http:https",
        }
        try:
            proc = subprocess.run(
                ["git", *pinned, "ls-remote", "--", url],
                capture_output=True,
                text=True,
                timeout=timeout_s,
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

    def _resolved(self, url: str, scheme: str) -> list[str]:
        """git options pinning the host of ``url`` to the addresses it resolves to,
        after refusing (ValueError) an internal one; none for a literal or file."""
        found = resolved_addresses(url, scheme, self.resolve)
        if scheme not in ("http", "https") or not found:
            return []
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(scheme, 0)
        listed = ",".join(f"[{a}]" if ":" in a else a for a in found)
        return ["-c", f"http.curloptResolve={url_host(parts.netloc)}:{port}:{listed}"]


def resolved_addresses(url: str, scheme: str, resolve: Resolver = socket.getaddrinfo) -> list[str]:
    """The addresses the host of ``url`` resolves to, after refusing (ValueError) an
    internal one REVISIT_ALLOWED_INTERNAL_HOSTS does not allow; none for an address
    literal (check_url judged it) or a file URL. OSError when the name does not resolve."""
    if scheme == "file":
        return []
    parts = urlsplit(url)
    host = url_host(parts.netloc)
    if not host or address(host) is not None:
        return []
    port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    found = sorted({str(info[4][0]) for info in resolve(host, port, proto=socket.IPPROTO_TCP)})
    check_addresses(host, found)
    return found
