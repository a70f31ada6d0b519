"""Bounded exponential backoff: how long a process waits before its next attempt.

Every long-running loop that loses a service (PostgreSQL, Redis, the Kafka
broker) waits and tries again instead of exiting (DESIGN invariant 7). The
waits double from ``initial_s`` up to ``maximum_s``, so a short outage is
noticed within a second and a long one costs a retry every ``maximum_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    """The delays of successive failed attempts; ``reset`` after a success."""

    initial_s: float = 0.5
    maximum_s: float = 30.0
    factor: float = 2.0
    _next_s: float = field(default=0.0, init=False)

    def next_delay_s(self) -> float:
        """The wait before the next attempt, then double it (up to ``maximum_s``)."""
        delay = self._next_s or self.initial_s
        self._next_s = min(delay * self.factor, self.maximum_s)
        return min(delay, self.maximum_s)

    def reset(self) -> None:
        """Forget past failures: the next wait is ``initial_s`` again."""
        self._next_s = 0.0
