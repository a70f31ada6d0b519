"""How a rebuild's ids are cut into one range per process."""

from __future__ import annotations

from itertools import pairwise

import pytest

from app.mirror_sync import split_span


@pytest.mark.parametrize(
    ("lo", "hi", "parts"), [(1, 10, 3), (5, 5, 1), (100, 1_000_099, 2), (7, 20, 14)]
)
def test_id_ranges_cover_the_span_once_with_widths_within_one(lo: int, hi: int, parts: int) -> None:
    ranges = list(split_span(lo, hi, parts))

    assert len(ranges) == parts
    assert ranges[0][0] == lo and ranges[-1][1] == hi
    assert all(a[1] + 1 == b[0] for a, b in pairwise(ranges))
    widths = {end - start + 1 for start, end in ranges}
    assert max(widths) - min(widths) <= 1
