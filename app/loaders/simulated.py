"""The simulated loader: its duration and outcome come from the origin's arguments.

For demos, benchmarks and tests of the workers. Arguments (all optional):

| argument               | meaning                                                   |
|------------------------|-----------------------------------------------------------|
| ``duration_s``         | how long the visit takes (default 0)                      |
| ``status``             | final status: full, partial, failed, not_found (default full) |
| ``snapshot``           | any string; its SHA-1 is the snapshot id (default: the url) |
| ``transient_failures`` | how many first attempts fail transiently (default 0)      |

It sleeps in short steps, so a Dramatiq time limit interrupts it promptly,
and never sleeps past ``timeout_s`` (its own I/O timeout).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from typing import Any, ClassVar

from app.domain.visit_status import is_success
from app.loaders.base import VisitResult

SLEEP_STEP_S = 0.05
_attempts: Counter[str] = Counter()
_lock = threading.Lock()


class SimulatedLoader:
    """Pretends to visit: waits, then reports what the arguments say."""

    publishes_statuses: ClassVar[bool] = True

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Wait ``duration_s`` (at most ``timeout_s``), then report the configured outcome."""
        started = time.monotonic()
        duration = float(arguments.get("duration_s", 0.0))
        deadline = started + min(duration, timeout_s)
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(SLEEP_STEP_S, left))
        elapsed = time.monotonic() - started
        if duration > timeout_s:
            return VisitResult("failed", None, elapsed, "timeout", timed_out=True)
        with _lock:
            _attempts[url] += 1
            attempt = _attempts[url]
        if attempt <= int(arguments.get("transient_failures", 0)):
            return VisitResult("failed", None, elapsed, f"transient failure {attempt}", True)
        status = str(arguments.get("status", "full"))
        if not is_success(status):
            return VisitResult(status, None, elapsed, f"simulated {status}")
        seed = str(arguments.get("snapshot", url)).encode()
        return VisitResult(status, hashlib.sha1(seed, usedforsecurity=False).digest(), elapsed)
