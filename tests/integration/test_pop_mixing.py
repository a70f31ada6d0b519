"""The weighted pop (queues/lua/pop.lua) against the real Redis."""

from datetime import UTC, datetime

import redis

from app.domain.placement import POOLS, Placement
from queues.mirror import Mirror

NOW = datetime(2026, 9, 1, tzinfo=UTC).timestamp()


def fill(mirror: Mirror, sizes: dict[str, int]) -> None:
    placements = []
    next_id = 1
    for pool, size in sizes.items():
        for i in range(size):
            placements.append(Placement(next_id, "pool", float(i), pool, float(i)))  # type: ignore[arg-type]
            next_id += 1
    mirror.add_new("git", placements)


def taken(mirror: Mirror, count: int, weights: object) -> dict[str, int]:
    result = mirror.pop("git", count, NOW, 86400.0, weights)  # type: ignore[arg-type]
    counts = dict.fromkeys(POOLS, 0)
    for p in result.popped:
        counts[p.pool] += 1
    return counts


def test_batch_is_split_by_weight(redis_url: str) -> None:
    mirror = Mirror(redis.Redis.from_url(redis_url), "t")
    fill(mirror, {"never_visited": 500, "lagging": 500, "no_last_update": 500, "up_to_date": 500})
    assert taken(mirror, 100, [49, 49, 2, 0]) == {
        "never_visited": 49,
        "lagging": 49,
        "no_last_update": 2,
        "up_to_date": 0,
    }


def test_share_of_a_dry_pool_goes_to_the_others(redis_url: str) -> None:
    mirror = Mirror(redis.Redis.from_url(redis_url), "t")
    fill(mirror, {"never_visited": 10, "lagging": 500, "no_last_update": 500})
    got = taken(mirror, 100, [49, 49, 2, 0])
    assert got["never_visited"] == 10
    assert sum(got.values()) == 100
    assert got["lagging"] > got["no_last_update"] > 2


def test_weight_zero_pools_fill_the_slots_nothing_else_can(redis_url: str) -> None:
    mirror = Mirror(redis.Redis.from_url(redis_url), "t")
    fill(mirror, {"lagging": 3, "up_to_date": 50})
    assert taken(mirror, 20, [49, 49, 2, 0]) == {
        "never_visited": 0,
        "lagging": 3,
        "no_last_update": 0,
        "up_to_date": 17,
    }


def test_seed_000_mixing_takes_one_minus_r_from_group_a(redis_url: str) -> None:
    mirror = Mirror(redis.Redis.from_url(redis_url), "t")
    # #A = 600, #B = 300 + 150 + 150 = 600 -> r = 1/2: 50 from A, 50/3 from each B pool.
    fill(mirror, {"no_last_update": 600, "never_visited": 300, "lagging": 150, "up_to_date": 150})
    got = taken(mirror, 100, "auto")
    assert got["no_last_update"] == 50
    assert sorted([got["never_visited"], got["lagging"], got["up_to_date"]]) == [16, 17, 17]


def test_pop_takes_the_lowest_scores_and_peek_moves_nothing(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    mirror = Mirror(client, "t")
    fill(mirror, {"lagging": 10})
    peeked = mirror.pop("git", 3, NOW, 86400.0, [0, 1, 0, 0], peek=True)
    assert [p.score for p in peeked.popped] == [0.0, 1.0, 2.0]
    assert mirror.sizes("git")["lagging"] == 10
    popped = mirror.pop("git", 3, NOW, 86400.0, [0, 1, 0, 0])
    assert [p.id for p in popped.popped] == [p.id for p in peeked.popped]
    assert mirror.sizes("git")["inflight"] == 3
