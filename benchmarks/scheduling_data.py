"""The origins of the scheduling benchmarks, the same for revisit and the reference.

Standard library only: ``benchmarks/reference_scheduling.py`` imports it from
the reference's own virtualenv. One deterministic stream of origins (seeded
RNG, generated in order), so both schedulers see the same URLs, the same
last_update distribution and the same visit history:

- half the origins have a forge ``last_update`` (every even index);
- 60 % have been visited successfully, all long enough ago (before the
  generator's ``NOW``) that no cooldown holds them back;
- of the visited origins with a last_update, half changed after their last
  successful visit (lagging), half did not (up to date);
- 5 % of the visited origins failed on their latest visit, a day after their
  last success (more than any failure cooldown before ``NOW``).

With 1,000,000 origins, revisit's pools hold about 200,000 never visited,
150,000 lagging, 500,000 without last_update and 150,000 up to date.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

VISIT_TYPE = "git"
SEED = 20261122
#: Every date generated is before this moment, which is before the benchmark runs.
NOW = datetime(2026, 11, 1, tzinfo=UTC)
START = datetime(2025, 1, 1, tzinfo=UTC)
VISITED_FRACTION = 0.6
LAGGING_FRACTION = 0.5
FAILED_FRACTION = 0.05
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class Origin:
    """One listed origin and its visit history (None: never visited successfully)."""

    index: int
    url: str
    last_update: datetime | None
    last_successful: datetime | None
    last_visit: datetime | None
    failed: bool
    snapshot: bytes | None
    next_visit_queue_position: datetime | None

    @property
    def last_scheduled(self) -> datetime | None:
        """When the latest visit was scheduled: an hour before it ended."""
        return None if self.last_visit is None else self.last_visit - timedelta(hours=1)


def origin_url(index: int) -> str:
    """The URL of origin ``index`` (the shape of benchmarks/common.py's listings)."""
    return f"https://forge.example/group-{index // 1000}/project-{index}.git"


def origins(count: int) -> Iterator[Origin]:
    """The ``count`` origins, always the same for the same ``count``."""
    rng = random.Random(SEED)
    for i in range(count):
        visited = rng.random() < VISITED_FRACTION
        lagging = rng.random() < LAGGING_FRACTION
        failed = visited and rng.random() < FAILED_FRACTION
        success = START + timedelta(seconds=rng.uniform(0, 600 * DAY_S))
        change_s = rng.uniform(3600, 60 * DAY_S)
        last_update: datetime | None = None
        if i % 2 == 0:
            if not visited:
                last_update = START - timedelta(seconds=rng.uniform(0, 3 * 365 * DAY_S))
            elif lagging:
                last_update = success + timedelta(seconds=change_s)
            else:
                last_update = success - timedelta(seconds=change_s)
        next_target = success + timedelta(seconds=rng.uniform(DAY_S, 64 * DAY_S))
        yield Origin(
            index=i,
            url=origin_url(i),
            last_update=last_update,
            last_successful=success if visited else None,
            last_visit=(success + timedelta(days=1 if failed else 0)) if visited else None,
            failed=failed,
            snapshot=hashlib.sha1(str(i).encode()).digest() if visited else None,
            next_visit_queue_position=next_target if visited else None,
        )
