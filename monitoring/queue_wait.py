"""Queue depth and estimated wait per visit queue, measured by the scheduler.

The scheduler reads each queue's depth every step and knows how many visits
it sent, so the visits drained between two steps are
``depth_before + sent_before - depth_now``. Their smoothed rate gives the wait
of a visit sent now by Little's law: ``depth / drain rate``.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.latency import wait_s
from monitoring.metrics import QUEUE_DEPTH, SCHEDULER_BATCH_SIZE

#: Weight of the latest step in the smoothed drain rate.
DRAIN_SMOOTHING = 0.2


@dataclass
class _QueueState:
    at_s: float
    depth_after_send: int
    drain_rate: float | None = None


class QueueWatch:
    """Depth, batch size and estimated wait of each queue the scheduler feeds."""

    def __init__(self) -> None:
        self._queues: dict[str, _QueueState] = {}

    def observe(
        self, visit_type: str, queue: str, lane: str, depth: int, sent: int, now_s: float
    ) -> float | None:
        """Record one step: ``depth`` read before sending ``sent`` visits at ``now_s``
        (monotonic seconds). Returns the estimated wait, None while unknown."""
        SCHEDULER_BATCH_SIZE.labels(visit_type, lane).observe(sent)
        QUEUE_DEPTH.labels(visit_type, queue, lane).set(depth + sent)
        state = self._queues.get(queue)
        if state is None:
            self._queues[queue] = state = _QueueState(now_s, depth + sent)
        elif now_s > state.at_s:
            drained = max(0, state.depth_after_send - depth)
            rate = drained / (now_s - state.at_s)
            if state.drain_rate is not None:
                rate = DRAIN_SMOOTHING * rate + (1 - DRAIN_SMOOTHING) * state.drain_rate
            state.drain_rate = rate
            state.at_s, state.depth_after_send = now_s, depth + sent
        # A drain of 0 over one window says nothing yet (workers may be busy
        # with long visits): unknown rather than forever.
        return wait_s(depth + sent, state.drain_rate or None)
