"""Simulated loader workers: a queue in front of a fixed number of workers.

The queue stands for a visit type's Dramatiq queue, whose length (queued plus
running) the scheduler keeps at ``queue_length``; a worker takes the next
message as soon as it finishes a visit, so workers idle only when the
scheduler has nothing to send.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Order:
    """A visit sent to the workers."""

    index: int
    """The origin's index in its visit type's world."""
    url: str
    visit: int
    policy: str
    scheduled_s: float
    request_id: int | None = None


class WorkerPool:
    """``workers`` workers behind one queue of at most ``queue_length`` visits."""

    def __init__(self, workers: int, queue_length: int) -> None:
        self.queue_length = queue_length
        self._free_at = [-math.inf] * workers
        heapq.heapify(self._free_at)
        self._queue: deque[Order] = deque()

    def depth(self, t: float) -> int:
        """Visits queued or running at ``t``: what the scheduler sees of the queue."""
        return len(self._queue) + sum(1 for f in self._free_at if f > t)

    def send(self, orders: list[Order]) -> None:
        """Enqueue the scheduler's orders."""
        self._queue.extend(orders)

    def work(self, until: float, visit: Callable[[Order, float], float]) -> int:
        """Run queued visits that start before ``until``; ``visit(order, start)``
        simulates one and returns its duration. Returns how many started."""
        started = 0
        while self._queue and self._free_at:
            free = heapq.heappop(self._free_at)
            start = max(free, self._queue[0].scheduled_s)
            if start >= until:
                heapq.heappush(self._free_at, free)
                break
            order = self._queue.popleft()
            heapq.heappush(self._free_at, start + visit(order, start))
            started += 1
        return started
