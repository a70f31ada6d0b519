"""Estimated wait per queue (seed 004, dynamic provisioning): the one estimator.

Every wait revisit reports is Little's law, a backlog over a throughput:
the scheduler's per-queue wait (throughput from the workers' registered
threads and recent visit durations), and an origin's ETA in ``revisit origin show``
(its rank over its pool's pick rate). An autoscaler (KEDA, an HPA on an
external metric) adds workers when the estimated wait of a queue exceeds its
target latency.
"""

from __future__ import annotations

from collections.abc import Sequence


def throughput_per_s(workers: int, recent_durations_s: Sequence[float]) -> float | None:
    """Visits per second ``workers`` threads complete at the mean recent duration;
    0 with no worker, None when no duration is known yet."""
    if workers <= 0:
        return 0.0
    if not recent_durations_s:
        return None
    total_s = sum(recent_durations_s)
    return workers * len(recent_durations_s) / total_s if total_s > 0 else float("inf")


def wait_s(backlog: float, throughput: float | None) -> float | None:
    """Seconds the last of ``backlog`` visits waits at ``throughput`` (visits/s):
    0 when nothing waits, inf when nothing is served, None when unknown."""
    if backlog <= 0:
        return 0.0
    if throughput is None:
        return None
    if throughput <= 0:
        return float("inf")
    return backlog / throughput


def estimated_wait_s(
    backlog: int, recent_durations_s: Sequence[float], workers: int
) -> float | None:
    """backlog * mean recent visit duration / workers; None when nothing is known.

    With no worker serving the queue, any backlog waits forever (inf).
    """
    return wait_s(backlog, throughput_per_s(workers, recent_durations_s))
