"""A reproducible journal of origin_visit_status records for the benchmarks.

Standard library only, so the reference implementation's virtualenv can import
it too and both clients process exactly the same records. Each origin gets
``messages // origins`` statuses (the remainder goes to the first origins):
``created`` then a final status per visit, one visit a day with jitter, the
final 1 s to 30 min after ``created``. Records come out in date order, as
loaders publish them; keys carry the date, so one origin's statuses land on
different partitions, as in the archive.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

START = datetime(2026, 1, 1, tzinfo=UTC)
FINALS = ("full", "partial", "failed", "not_found")
FINAL_WEIGHTS = (75, 5, 15, 5)
EVENTFUL_CHANCE = 0.4
VISIT_TYPE = "git"


def origin_url(index: int) -> str:
    """URL of benchmark origin ``index``: 50 forges."""
    return f"https://forge{index % 50}.example/group{index % 997}/repo{index}.git"


def _snapshot(index: int, version: int) -> bytes:
    return hashlib.sha1(f"{index}/{version}".encode()).digest()


def _statuses_of(index: int, count: int, rng: random.Random) -> Iterator[tuple[Any, ...]]:
    version = 0
    visit = 0
    day = timedelta(days=1)
    while count > 0:
        visit += 1
        started = START + visit * day + timedelta(seconds=rng.uniform(-36000, 36000))
        yield (started, index, visit, "created", None, None)
        count -= 1
        if count == 0:
            return
        status = rng.choices(FINALS, FINAL_WEIGHTS)[0]
        snapshot = None
        if status in ("full", "partial"):
            if version == 0 or rng.random() < EVENTFUL_CHANCE:
                version += 1
            snapshot = _snapshot(index, version)
        duration = rng.uniform(1, 1800)
        yield (started + timedelta(seconds=duration), index, visit, status, snapshot, duration)
        count -= 1


def visit_statuses(
    messages: int, origins: int, seed: int = 5, url_of: Callable[[int], str] = origin_url
) -> list[dict[str, Any]]:
    """``messages`` origin_visit_status records over ``origins`` origins, in date order;
    ``url_of`` names origin ``index`` (the growth benchmark maps them onto its listing)."""
    rng = random.Random(seed)
    per_origin, extra = divmod(messages, origins)
    rows: list[tuple[Any, ...]] = []
    for index in range(origins):
        rows.extend(_statuses_of(index, per_origin + (index < extra), rng))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return [
        {
            "origin": url_of(index),
            "visit": visit,
            "date": date,
            "status": status,
            "snapshot": snapshot,
            "type": VISIT_TYPE,
            "metadata": None if duration is None else {"duration_s": round(duration, 3)},
        }
        for date, index, visit, status, snapshot, duration in rows
    ]
