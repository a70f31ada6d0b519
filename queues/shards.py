"""A visit type's mirror split into shards: one pop and one claim per shard.

One visit type's keys share a hash tag, so on a Redis Cluster they live on one
node; git is most of an archive. Splitting its pools into N shards (one hash
tag each, origin ``id`` in shard ``id mod N``) spreads it over the nodes. Every
Lua script works on one shard atomically; what spans shards is here:

- a pop of n origins asks each shard for a share of n, then the shards that
  gave all they were asked for the shortfall, and merges the results in (pool,
  score) order. By weights, a shard's share is in proportion to the origins its
  pools hold (largest remainder). By due time ('due'), it is the first visits
  it sets apart (in proportion to the never visited origins it holds) plus its
  part of the origins due first across every shard (a k-way merge of the
  shards' due orders, which pop.lua ranks without taking);
- a claim walks the shards in turn, each claiming at most what is left.

What is lost against one key set: under weights, a shard gives the head of its
own pools even while another holds better-scored origins (each shard being a
sample of the visit type, the weights hold overall); a due pop's first visits
are the oldest of each shard rather than of all; a pop is atomic per shard, not
across shards (no origin is in two shards, so none is taken twice).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

from app.domain.placement import POOLS, Placement, PoolName
from queues.keys import shard_of

#: Pool weights of a pop: one per pool in POOLS order, or a mode ('auto', 'due').
Weights = Sequence[float] | str


class Popped(NamedTuple):
    """One origin taken by a pop: its id, the pool it came from and its score there
    (a named tuple, the cheapest to build: a pop builds thousands)."""

    id: int
    pool: PoolName
    score: float


@dataclass(frozen=True, slots=True)
class PopResult:
    """What one pop did: origins now in flight, and how many came back to the pools."""

    popped: list[Popped]
    cooled: int
    lost: int


def split_count(count: int, sizes: Sequence[int]) -> list[int]:
    """``count`` split over shards in proportion to ``sizes`` (largest remainder);
    no shard is asked for more than it holds while another has room."""
    total = sum(sizes)
    if count <= 0 or total <= 0:
        return [0] * len(sizes)
    count = min(count, total)
    exact = [count * size / total for size in sizes]
    parts = [int(x) for x in exact]
    by_remainder = sorted(range(len(sizes)), key=lambda k: (parts[k] - exact[k], k))
    for k in by_remainder[: count - sum(parts)]:
        parts[k] += 1
    return parts


def by_shard(placements: Iterable[Placement], shards: int) -> dict[int, list[Placement]]:
    """Placements grouped by the shard of their origin, in their order."""
    groups: dict[int, list[Placement]] = defaultdict(list)
    for p in placements:
        groups[shard_of(p.id, shards)].append(p)
    return groups


class DueRank(NamedTuple):
    """What a due pop of one shard would take, without taking it: how many never
    visited origins it sets apart for first visits, the due times of the origins
    it takes after them in its order, and how many origins came back from
    cooling and from lost visits."""

    first: int
    dues: list[float]
    cooled: int
    lost: int


def first_visit_parts(count: int, never_visited: Sequence[int]) -> list[float]:
    """Each shard's part of a batch of ``count`` for its first-visit share: in
    proportion to the never visited origins it holds, so the share goes where
    first visits wait, whichever shard holds the origins due first."""
    total = sum(never_visited)
    return [count * n / total if total else 0.0 for n in never_visited]


def due_split(
    rank_from: Callable[[int], DueRank], shards: int, count: int
) -> tuple[list[int], int, int]:
    """How many origins of a due pop of ``count`` each shard gives: the first
    visits it sets apart, then its part of the origins due first across every
    shard (``rank_from(shard)``); with how many came back from cooling and lost
    visits."""
    ranked = [rank_from(shard) for shard in range(shards)]
    asked, left = [], count
    for r in ranked:
        # Each shard rounds its owed fractions up alone: together they may pass
        # the batch. A shard asked for less keeps what it is owed (pop.lua).
        asked.append(min(r.first, left))
        left -= asked[-1]
    # heapq.merge takes the least head each time: the same merge as pop.lua's.
    merged = heapq.merge(*([(due, shard) for due in r.dues] for shard, r in enumerate(ranked)))
    for _, shard in islice(merged, left):
        asked[shard] += 1
    return asked, sum(r.cooled for r in ranked), sum(r.lost for r in ranked)


def pop_across(
    pop_from: Callable[[int, int], PopResult],
    asked: Sequence[int],
    count: int,
    *,
    peek: bool,
    returned: tuple[int, int] = (0, 0),
) -> PopResult:
    """One pop per shard (``pop_from(shard, n)``) of its share ``asked`` of the
    ``count``, merged; ``returned``: origins already brought back from cooling
    and from lost visits (by ``due_split``)."""
    popped: list[Popped] = []
    cooled, lost = returned
    full: list[int] = []
    for shard, share in enumerate(asked):
        # Every shard is popped, even for 0: its cooled and lost origins return.
        result = pop_from(shard, share)
        popped += result.popped
        cooled, lost = cooled + result.cooled, lost + result.lost
        if len(result.popped) == share:
            full.append(shard)
    for shard in full:
        short = count - len(popped)
        if short <= 0 or peek:
            break
        # A refill pop returns cooled and lost origins too (past a pop's move limit).
        refill = pop_from(shard, short)
        popped += refill.popped
        cooled, lost = cooled + refill.cooled, lost + refill.lost
    order = {pool: i for i, pool in enumerate(POOLS)}
    popped.sort(key=lambda p: (order[p.pool], p.score))
    return PopResult(popped, cooled, lost)


def claim_across(
    claim_from: Callable[[int, list[int]], list[Popped]],
    shards: int,
    ids: Sequence[int],
    most: int,
) -> list[Popped]:
    """Claim ``ids`` in windows of what is left to claim, each window's ids in one
    claim per shard (``claim_from(shard, ids)``): at most ``most`` in all, no id
    claimed while a better-ranked one that could be was passed over, returned in
    the order of ``ids``."""
    claimed: list[Popped] = []
    start = 0
    while start < len(ids) and len(claimed) < most:
        window = ids[start : start + most - len(claimed)]
        start += len(window)
        groups: dict[int, list[int]] = defaultdict(list)
        for origin in window:
            groups[shard_of(origin, shards)].append(origin)
        for shard, group in sorted(groups.items()):
            claimed += claim_from(shard, group)
    rank = {origin: i for i, origin in enumerate(ids)}
    return sorted(claimed, key=lambda p: rank[p.id])
