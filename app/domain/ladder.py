"""The interval ladder of seed 000: how far to move an origin after a visit.

The index into the ladder grows by one after an uneventful visit and shrinks
by two after an eventful one, so an origin that keeps changing is visited
about daily and a dormant one drifts towards the maximum interval.
"""

from __future__ import annotations

DEFAULT_INDEX = 4
EVENTFUL_STEP = -2
UNEVENTFUL_STEP = 1


def interval_units(index: int) -> float:
    """Interval, in ladder units (days in production), for a ladder index.

    Index 0 and 1: 1; 2 to 4: 2; 5 and up: 4^(index-4), i.e. 4, 16, 64, ...
    """
    if index < 0:
        raise ValueError(f"ladder index must be >= 0, got {index}")
    if index <= 1:
        return 1.0
    if index <= 4:
        return 2.0
    return float(4 ** (index - 4))


def max_index(max_interval_units: float) -> int:
    """Largest index whose interval does not exceed ``max_interval_units``."""
    index = 0
    while interval_units(index + 1) <= max_interval_units:
        index += 1
    return index


def clamp_index(index: int, top: int) -> int:
    """Keep a ladder index within [0, top]."""
    return max(0, min(top, index))
