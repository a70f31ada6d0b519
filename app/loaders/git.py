"""The git loader: lists the remote's refs and derives a snapshot id from them."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from collections.abc import Iterable
from typing import Any, ClassVar
from urllib.parse import urlsplit

from app.loaders.base import VisitResult
from app.settings import get_settings

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

    Only the URL schemes an operator allows (``REVISIT_GIT_ALLOWED_SCHEMES``)
    are visited: otherwise a save code now request for ``file:///etc`` or a
    local path would make the worker read its own filesystem. git itself is
    held to the same list (``GIT_ALLOW_PROTOCOL``), which also covers
    redirects.
    """

    publishes_statuses: ClassVar[bool] = True

    def __init__(self, allowed_schemes: Iterable[str] | None = None) -> None:
        schemes = get_settings().git_allowed_schemes if allowed_schemes is None else allowed_schemes
        self.allowed_schemes = frozenset(s.lower() for s in schemes)

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Visit ``url``: a timeout or git error is failed, a missing repository not_found,
        a URL whose scheme is not allowed failed without running git."""
        started = time.monotonic()
        scheme = url_scheme(url)
        if scheme not in self.allowed_schemes:
            allowed = ", ".join(sorted(self.allowed_schemes)) or "none"
            return VisitResult(
                "failed", None, 0.0, f"url: scheme {scheme!r} not allowed ({allowed})"
            )
        env = {
            **os.environ,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
            "GIT_ALLOW_PROTOCOL": ":".join(sorted(self.allowed_schemes)),
        }
        try:
            proc = subprocess.run(
                ["git", "ls-remote", "--", url],
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
