"""Express and slow lanes (seed 003): which lane each visit goes to.

The express lane's time limit is the longest anyone should wait behind a
visit; a visit that exceeds it is stopped and re-sent to the slow lane, which
takes such visits first and, when it has none, any work. Prediction (seed 003,
"optimizing using prediction"): an origin whose last visit took longer than
the express limit goes straight to the slow lane, and express work is sent
shortest predicted first, so predicted-slow visits come last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

Lane = Literal["express", "slow", "priority"]
LANES: tuple[Lane, ...] = ("express", "slow", "priority")
T = TypeVar("T")

#: The longest any visit may run: the most a visit type's time limit may be,
#: the worker actor's own limit, and the life of a hoster slot.
MAX_TIME_LIMIT_S = 4 * 3600.0


def predicted_slow(predicted_s: float | None, express_limit_s: float) -> bool:
    """Whether a visit is expected to outlast the express lane (unknown: no)."""
    return predicted_s is not None and predicted_s > express_limit_s


def assign_lanes(
    visits: Sequence[T],
    predicted_s: Callable[[T], float | None],
    express_slots: int,
    express_limit_s: float,
) -> tuple[list[T], list[T]]:
    """Split a batch into (express, slow) lists, each in sending order.

    Predicted-slow visits go to the slow lane; the others fill the express
    lane's ``express_slots``, shortest predicted first (unknown counts as
    short); what does not fit goes to the slow lane too, which takes any work
    when it has none of its own.
    """
    slow = [v for v in visits if predicted_slow(predicted_s(v), express_limit_s)]
    fast = sorted(
        (v for v in visits if not predicted_slow(predicted_s(v), express_limit_s)),
        key=lambda v: predicted_s(v) or 0.0,
    )
    return fast[:express_slots], slow + fast[express_slots:]
