"""A visit type's mirror split into shards: one pop and one claim per shard.

One visit type's keys share a hash tag, so on a Redis Cluster they live on
one node; git is most of an archive. Splitting its pools into N shards (one
hash tag each, origin ``id`` in shard ``id mod N``) spreads it over the
nodes. Every Lua script still works on one shard atomically (pop.lua,
claim.lua, place.lua are unchanged); what spans shards is here:

- a pop of n origins asks each shard for a share of n in proportion to how
  many origins its pools hold (largest remainder), in one atomic pop per
  shard, then asks shards that gave all they were asked for the shortfall;
  the results are merged in the order one pop returns them (pool, score);
- a claim walks the shards in turn, each claiming at most what is left.

What is lost against one key set: the pools' weights hold per shard (each
shard is a sample of the visit type, so they hold overall), and a pop is
atomic per shard, not across shards (no origin is in two shards, so none can
be taken twice).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from app.domain.placement import POOLS, Placement
from queues.keys import shard_of

if TYPE_CHECKING:
    from queues.mirror import Mirror, Popped, PopResult, Weights


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


def pool_sizes(mirror: Mirror, visit_type: str) -> list[int]:
    """How many origins wait in the pools of each shard."""
    pipe = mirror.client.pipeline(transaction=False)
    for keys in mirror.shard_keys(visit_type):
        for key in keys.pools():
            pipe.zcard(key)
    counts = [int(n) for n in pipe.execute()]
    return [sum(counts[i : i + len(POOLS)]) for i in range(0, len(counts), len(POOLS))]


def pop_across(
    mirror: Mirror,
    visit_type: str,
    count: int,
    now_s: float,
    scheduled_cooldown_s: float,
    weights: Weights,
    *,
    peek: bool,
    first_visit_share: float = 0.0,
) -> PopResult:
    """One pop per shard, counts in proportion to the shards' pools, merged."""
    from queues.mirror import PopResult

    def pop_from(shard: int, n: int) -> PopResult:
        return mirror.pop(
            visit_type,
            n,
            now_s,
            scheduled_cooldown_s,
            weights,
            peek=peek,
            first_visit_share=first_visit_share,
            shard=shard,
        )

    asked = split_count(count, pool_sizes(mirror, visit_type))
    popped: list[Popped] = []
    cooled = lost = 0
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
        popped += pop_from(shard, short).popped
    order = {pool: i for i, pool in enumerate(POOLS)}
    popped.sort(key=lambda p: (order[p.pool], p.score))
    return PopResult(popped, cooled, lost)


def claim_across(
    mirror: Mirror, visit_type: str, ids: Sequence[int], now_s: float, most: int, *, peek: bool
) -> list[Popped]:
    """Claim ``ids`` in windows of what is left to claim, each window's ids in one
    claim per shard: at most ``most`` in all, no id claimed while a better-ranked
    one that could be was passed over, returned in the order of ``ids``."""
    shards = mirror.shards(visit_type)
    claimed: list[Popped] = []
    start = 0
    while start < len(ids) and len(claimed) < most:
        window = ids[start : start + most - len(claimed)]
        start += len(window)
        groups: dict[int, list[int]] = defaultdict(list)
        for origin in window:
            groups[shard_of(origin, shards)].append(origin)
        for shard, group in sorted(groups.items()):
            claimed += mirror.claim(visit_type, group, now_s, len(group), peek=peek, shard=shard)
    rank = {origin: i for i, origin in enumerate(ids)}
    return sorted(claimed, key=lambda p: rank[p.id])
