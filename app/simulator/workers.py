"""Simulated loader workers: a queue in front of a fixed number of workers.

The queue stands for a visit type's Dramatiq queue, whose length (queued plus
running) the scheduler keeps at ``queue_length``; a worker takes the next
message as soon as it finishes a visit, so workers idle only when the
scheduler has nothing to send. ``advance`` stops whenever enough slots are
free for the scheduler to refill the queue, as production's scheduler, which
steps every second, refills it within a second of a visit's end.
"""

from __future__ import annotations

import heapq
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


Visit = Callable[[Order, float], float]
"""``visit(order, start)`` simulates one visit and returns its duration (s)."""


class WorkerPool:
    """``workers`` workers behind one queue of at most ``queue_length`` visits.

    ``window`` is the measured period: ``busy_s`` counts the worker time spent
    in it (a visit straddling an edge counts its part inside)."""

    def __init__(
        self, workers: int, queue_length: int, window: tuple[float, float] = (0.0, 0.0)
    ) -> None:
        self.workers = workers
        self.queue_length = queue_length
        self.window = window
        self.now = -float("inf")
        self.busy_s = 0.0
        self._ends: list[float] = []  # end times of the running visits (a heap)
        self._queue: deque[Order] = deque()

    def depth(self, t: float) -> int:
        """Visits queued or running at ``t``: what the scheduler sees of the queue."""
        return len(self._queue) + sum(1 for end in self._ends if end > t)

    def send(self, orders: list[Order]) -> None:
        """Enqueue the scheduler's orders."""
        self._queue.extend(orders)

    def _start_at(self, t: float, visit: Visit) -> int:
        """Give the queued visits to the workers free at ``t``; how many started."""
        while self._ends and self._ends[0] <= t:
            heapq.heappop(self._ends)
        started = 0
        while self._queue and len(self._ends) < self.workers:
            order = self._queue.popleft()
            start = max(t, order.scheduled_s)
            duration = visit(order, start)
            low, high = self.window
            self.busy_s += max(0.0, min(high, start + duration) - max(low, start))
            heapq.heappush(self._ends, start + duration)
            started += 1
        return started

    def advance(self, t: float, until: float, visit: Visit, room: int) -> float | None:
        """Run the workers from ``t``: start what they can take now, then visit end
        after visit end, until at least ``room`` slots are free after one of them
        (return its time: the scheduler refills the queue then) or ``until``
        (return None: nothing to refill before it)."""
        self.now = max(self.now, t)
        self._start_at(self.now, visit)
        while self._ends and self._ends[0] < until:
            self.now = self._ends[0]
            self._start_at(self.now, visit)
            if self.queue_length - self.depth(self.now) >= room:
                return self.now
        self.now = max(self.now, until)
        return None

    def work(self, until: float, visit: Visit) -> None:
        """Run the workers until ``until``, refilling nothing."""
        self.advance(self.now, until, visit, self.queue_length + 1)
