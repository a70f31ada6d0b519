"""Estimated wait per queue (seed 004, dynamic provisioning).

An autoscaler (KEDA, an HPA on an external metric) adds workers when the
estimated wait of a queue exceeds its target latency.
"""

from __future__ import annotations

from collections.abc import Sequence


def estimated_wait_s(
    backlog: int, recent_durations_s: Sequence[float], workers: int
) -> float | None:
    """backlog * mean recent visit duration / workers; None when nothing is known.

    With no worker serving the queue, any backlog waits forever (inf).
    """
    if backlog <= 0:
        return 0.0
    if workers <= 0:
        return float("inf")
    if not recent_durations_s:
        return None
    mean = sum(recent_durations_s) / len(recent_durations_s)
    return backlog * mean / workers
