"""The pools' members for a rebuild, sorted as Redis orders a sorted set, in
bounded memory.

A rebuild writes each pool in order (``queues.mirror``'s staged buckets), but
reads its origins from PostgreSQL in id order. Held whole in Python, 10M
origins took about 1 GB; an archive's 400M would not fit. So at most ``RUN``
members are held in memory, over all pools: past that, the pool holding the
most is sorted and spilled to a temporary file as a run, and reading a pool
merges its runs.
"""

from __future__ import annotations

import heapq
import pickle
import tempfile
from collections import defaultdict
from collections.abc import Hashable, Iterator
from typing import IO

#: Members held in memory, over all pools, before a pool's run is spilled.
RUN = 1_000_000
#: Members per pickled block of a spilled run.
BLOCK = 10_000

Pair = tuple[float, str]


class SortedRuns:
    """(score, member) pairs by pool, read back by score then member (Redis's
    order for a sorted set: members compare as bytes, which for ids' digits is
    text order). Spilled runs live in temporary files until ``close``."""

    def __init__(self, run: int | None = None) -> None:
        self._run = run or RUN
        self._held: defaultdict[Hashable, list[Pair]] = defaultdict(list)
        self._spilled: defaultdict[Hashable, list[IO[bytes]]] = defaultdict(list)
        self._counts: defaultdict[Hashable, int] = defaultdict(int)
        self._holding = 0

    def count(self, pool: Hashable) -> int:
        """How many members ``pool`` has."""
        return self._counts[pool]

    def add(self, pool: Hashable, score: float, member: str) -> None:
        self._held[pool].append((score, member))
        self._counts[pool] += 1
        self._holding += 1
        if self._holding >= self._run:
            self._spill(max(self._held, key=lambda p: len(self._held[p])))

    def _spill(self, pool: Hashable) -> None:
        held = self._held.pop(pool)
        held.sort()
        spill = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close)
        for start in range(0, len(held), BLOCK):
            pickle.dump(held[start : start + BLOCK], spill, pickle.HIGHEST_PROTOCOL)
        spill.seek(0)
        self._spilled[pool].append(spill)
        self._holding -= len(held)

    def ordered(self, pool: Hashable) -> Iterator[Pair]:
        """Every pair of ``pool``, in order (once: its runs are consumed)."""
        held = self._held.pop(pool, [])
        self._holding -= len(held)
        held.sort()
        spilled = self._spilled.get(pool)
        if not spilled:
            return iter(held)
        return heapq.merge(held, *(_read(spill) for spill in spilled))

    def close(self) -> None:
        for spills in self._spilled.values():
            for spill in spills:
                spill.close()
        self._spilled.clear()
        self._held.clear()
        self._holding = 0


def _read(spill: IO[bytes]) -> Iterator[Pair]:
    while True:
        try:
            block: list[Pair] = pickle.load(spill)  # our own file, written just before
        except EOFError:
            return
        yield from block
