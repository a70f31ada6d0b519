"""The git loader: lists the remote's refs and derives a snapshot id from them."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from typing import Any

from app.loaders.base import VisitResult

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


class GitLoader:
    """Visits git origins with ``git ls-remote`` (refs only, no object transfer)."""

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Visit ``url``: a timeout or git error is failed, a missing repository not_found."""
        started = time.monotonic()
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
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
