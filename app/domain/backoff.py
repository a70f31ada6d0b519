"""Bounded exponential backoff: how long to wait before the next attempt.

Every long-running loop that loses a service (PostgreSQL, Redis, the Kafka
broker) waits and tries again instead of exiting (DESIGN invariant 7), and a
failing scheduled lister is retried later. The waits double from
``initial_s`` up to ``maximum_s``, so a short outage is noticed soon and a
long one costs a retry every ``maximum_s``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    """The delays of successive failed attempts; ``reset`` after a success."""

    initial_s: float = 0.5
    maximum_s: float = 30.0
    factor: float = 2.0
    #: Failed attempts in a row so far.
    failures: int = 0

    def delay_s(self, failures: int) -> float:
        """The wait after ``failures`` (≥ 1) failed attempts in a row."""
        return float(min(self.initial_s * self.factor ** min(failures - 1, 60), self.maximum_s))

    def next_delay_s(self) -> float:
        """Count one more failure and return the wait before the next attempt."""
        self.failures += 1
        return self.delay_s(self.failures)

    def reset(self) -> None:
        """Forget past failures: the next wait is ``initial_s`` again."""
        self.failures = 0
