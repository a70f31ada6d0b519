"""Each pool of the mirror is split into small sorted sets that Redis keeps as
listpacks (issue 35): a bucket splits past 120 members, a run of equal scores
splits by member, an emptied bucket leaves the index, and a pool costs well
under 100 bytes an origin."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from itertools import pairwise

import pytest

from app.db.connection import DictConnection
from app.domain.placement import POOLS, Placement
from app.services.context import Context
from app.services.mirror_sync import check, rebuild
from tests.integration.helpers import list_origins, pool_buckets, pool_members

pytestmark = pytest.mark.every_mirror

NOW = 1_788_000_000.0


def in_pool(origin: int, score: float, pool: str = "lagging", version: int = 1) -> Placement:
    return Placement(origin, "pool", score, pool, score, version)  # type: ignore[arg-type]


def buckets(ctx: Context, pool: str = "lagging") -> list[list[tuple[bytes, float]]]:
    client = ctx.mirror.client
    return [
        client.zrange(key, 0, -1, withscores=True)  # type: ignore[misc]
        for key in pool_buckets(ctx.mirror, "git", pool)
    ]


def assert_well_formed(ctx: Context, pool: str = "lagging") -> None:
    """Buckets in order, none empty, none past 120 members, the size right."""
    found = buckets(ctx, pool)
    assert all(found)
    assert max(map(len, found), default=0) <= 120
    for lower, upper in pairwise(found):  # as Redis orders: by score, then member
        assert (lower[-1][1], lower[-1][0]) < (upper[0][1], upper[0][0])
    assert ctx.mirror.sizes("git")[pool] == sum(map(len, found))


def test_a_bucket_past_120_members_splits_and_the_pool_keeps_its_order(ctx: Context) -> None:
    rng = random.Random(1)
    scores = {i: NOW + rng.uniform(-1e6, 1e6) for i in range(1, 1001)}
    for start in range(1, 1001, 50):  # placements in batches, as the journal makes them
        ctx.mirror.place("git", [in_pool(i, scores[i]) for i in range(start, start + 50)])

    found = buckets(ctx)
    assert len(found) > 1000 // 120
    assert max(map(len, found)) <= 120
    for key in pool_buckets(ctx.mirror, "git", "lagging"):
        assert ctx.mirror.client.object("encoding", key) == b"listpack"
    assert_well_formed(ctx)
    expected = sorted((s, i) for i, s in scores.items())
    assert [(int(m), s) for m, s in pool_members(ctx.mirror, "git", "lagging")] == [
        (i, s) for s, i in expected
    ]
    popped = ctx.mirror.pop("git", 300, NOW, 86400.0, [0.0, 1.0, 0.0, 0.0]).popped
    assert [(p.id, p.score) for p in popped] == [(i, s) for s, i in expected[:300]]
    assert_well_formed(ctx)


def test_a_run_of_more_than_128_equal_scores_splits_by_member_and_moves_as_any(
    ctx: Context,
) -> None:
    ctx.mirror.place("git", [in_pool(i, 0.0) for i in range(1, 301)])
    ctx.mirror.place("git", [in_pool(i, float(i)) for i in range(301, 401)])
    ctx.mirror.place("git", [in_pool(i, -1.0 * i) for i in range(401, 451)])

    run = [b for b in buckets(ctx) if b[0][1] == 0.0]
    assert len(run) > 2 and sum(map(len, run)) >= 300 - 120
    for key in pool_buckets(ctx.mirror, "git", "lagging"):
        assert ctx.mirror.client.object("encoding", key) == b"listpack"
    assert_well_formed(ctx)
    # every origin of the run can still be found and moved
    ctx.mirror.place("git", [in_pool(i, 1000.5, "up_to_date", 2) for i in range(1, 301, 2)])
    assert ctx.mirror.sizes("git")["lagging"] == 300
    # the 50 negative scores first, then the run by member (as in one sorted set)
    before = [i for i in range(2, 301, 2) if str(i) < "2"]
    assert ctx.mirror.locate("git", 2).rank == 50 + len(before)
    assert ctx.mirror.locate("git", 300).rank == 50 + len(
        [i for i in range(2, 301, 2) if str(i) < "300"]
    )
    assert_well_formed(ctx)
    assert_well_formed(ctx, "up_to_date")
    assert ctx.mirror.claim("git", [2, 4], NOW, 2)[0].score == 0.0
    assert_well_formed(ctx)
    members = pool_members(ctx.mirror, "git", "lagging")
    assert members == sorted(members, key=lambda m: (m[1], m[0]))


def test_a_run_of_equal_scores_over_more_than_128_buckets_moves_by_member(
    ctx: Context,
) -> None:
    """A listing puts thousands of origins at one score: the index of their pool
    then holds a long run of buckets bounded at that score, searched by member."""
    total = 20_000
    ctx.mirror.add_new("git", [in_pool(i, 0.0) for i in range(1, total + 1)])
    ctx.mirror.place("git", [in_pool(i, float(i)) for i in range(total + 1, total + 101)])
    assert len(pool_buckets(ctx.mirror, "git", "lagging")) > 128

    moved = range(7, total + 1, 3)
    ctx.mirror.place("git", [in_pool(i, 5.5, "up_to_date", 2) for i in moved])

    kept = sorted(str(i) for i in set(range(1, total + 1)) - set(moved))
    members = pool_members(ctx.mirror, "git", "lagging")
    assert [m.decode() for m, s in members if s == 0.0] == kept
    assert ctx.mirror.sizes("git")["lagging"] == total + 100 - len(moved)
    assert_well_formed(ctx)
    assert_well_formed(ctx, "up_to_date")
    assert ctx.mirror.claim("git", [2, 19_998], NOW, 2)[0].score == 0.0
    assert ctx.mirror.sizes("git")["lagging"] == total + 100 - len(moved) - 2
    assert_well_formed(ctx)


def test_an_emptied_bucket_leaves_the_index_and_its_range_goes_to_the_bucket_below(
    ctx: Context,
) -> None:
    ctx.mirror.place("git", [in_pool(i, float(i)) for i in range(1, 400)])
    index_before = len(pool_buckets(ctx.mirror, "git", "lagging"))
    middle = buckets(ctx)[1]
    ids = [int(m) for m, _ in middle]
    ctx.mirror.place("git", [Placement(i, "absent", 0.0, "lagging", 0.0, 2) for i in ids])

    assert len(pool_buckets(ctx.mirror, "git", "lagging")) == index_before - 1
    assert_well_formed(ctx)
    # an origin with a score in the emptied range goes to the bucket below it
    ctx.mirror.place("git", [in_pool(ids[0], float(ids[0]), version=3)])
    assert_well_formed(ctx)
    assert ctx.mirror.locate("git", ids[0]).rank == ids[0] - 1
    # popping everything empties every bucket, and the pool starts again
    assert len(ctx.mirror.pop("git", 1000, NOW, 86400.0, [0.0, 1.0, 0.0, 0.0]).popped) == 400 - len(
        ids
    )
    assert pool_buckets(ctx.mirror, "git", "lagging") == []
    assert ctx.mirror.sizes("git")["lagging"] == 0
    ctx.mirror.place("git", [in_pool(5000, 7.0, version=1)])
    assert pool_members(ctx.mirror, "git", "lagging") == [(b"5000", 7.0)]


def test_a_pool_costs_under_100_bytes_an_origin_with_its_entry(ctx: Context) -> None:
    """Scores with microseconds (as epoch_s gives): the worst case for a listpack."""
    rng = random.Random(2)
    total = 20_000
    token = ctx.mirror.begin_rebuild("git")
    ctx.mirror.stage(
        "git",
        [
            in_pool(i, round(NOW + rng.uniform(-1e7, 1e7), 6), POOLS[i % 4], version=i)
            for i in range(1, total + 1)
        ],
    )
    ctx.mirror.end_bulk("git", token)
    assert ctx.mirror.finish_rebuild("git", token) == total
    # and placements after the rebuild split the buckets it wrote
    ctx.mirror.place(
        "git",
        [
            in_pool(i, round(NOW + rng.uniform(-1e7, 1e7), 6), POOLS[i % 4], version=total + i)
            for i in range(1, total + 1, 3)
        ],
    )

    client = ctx.mirror.client
    keys = ctx.mirror.keys("git")
    used = sum(
        int(client.memory_usage(key) or 0)  # type: ignore[arg-type]
        for key in client.scan_iter(match=f"{keys.versions}:*", count=1000)
    )
    assert used / total < 100
    for pool in POOLS:
        assert_well_formed(ctx, pool)


def test_a_mirror_of_one_sorted_set_per_pool_counts_as_not_built_until_rebuilt(
    conn: DictConnection, ctx: Context
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, ["https://old.example/1.git"], now=now)
    rebuild(conn, ctx, "git", now)
    keys = ctx.mirror.keys("git")
    # As such a mirror was left: its meta names no layout, its pools are sorted sets.
    ctx.mirror.client.hdel(keys.meta, "layout")
    [old_pool, *_, parked] = keys.legacy_keys()
    ctx.mirror.client.zadd(old_pool, {"1": 1.0})
    ctx.mirror.client.hset(parked, "1", "1|1.0")
    assert not ctx.mirror.is_built("git")

    rebuild(conn, ctx, "git", now)

    assert ctx.mirror.is_built("git")
    assert not ctx.mirror.client.exists(old_pool, parked)
    assert check(conn, ctx, "git", now) == []


def test_new_origins_go_to_their_buckets_and_one_given_twice_ends_in_its_last_place(
    ctx: Context,
) -> None:
    ctx.mirror.add_new("git", [in_pool(i, float(i % 50)) for i in range(1, 301)])
    ctx.mirror.add_new("git", [in_pool(301, 5.0), in_pool(301, 900.0, "up_to_date")])

    assert_well_formed(ctx)
    assert ctx.mirror.sizes("git")["lagging"] == 300
    assert pool_members(ctx.mirror, "git", "up_to_date") == [(b"301", 900.0)]
    assert ctx.mirror.locate("git", 301).pool == "up_to_date"


def test_new_origins_in_runs_of_equal_scores_across_id_lengths_keep_redis_order(
    ctx: Context,
) -> None:
    """Members of equal score sort as strings ('10' before '9'), as Redis orders
    them; every origin is then found where its entry says, and moves."""
    rng = random.Random(5)
    ids = list(range(1, 5001))
    rng.shuffle(ids)
    expected: dict[int, float] = {}
    for batch in (ids[:1500], ids[1500:3000], ids[3000:]):
        placements = [in_pool(i, float(rng.randrange(10))) for i in batch]
        expected |= {p.id: p.score for p in placements}
        ctx.mirror.add_new("git", placements)

    def in_redis_order() -> list[tuple[bytes, float]]:
        return sorted(
            ((str(i).encode(), s) for i, s in expected.items()), key=lambda m: (m[1], m[0])
        )

    assert_well_formed(ctx)
    assert pool_members(ctx.mirror, "git", "lagging") == in_redis_order()
    moved = rng.sample(sorted(expected), 500)
    ctx.mirror.place("git", [in_pool(i, 100.0 + i % 3, version=2) for i in moved])
    expected |= {i: 100.0 + i % 3 for i in moved}
    assert_well_formed(ctx)
    assert pool_members(ctx.mirror, "git", "lagging") == in_redis_order()


def test_new_origins_added_in_bulk_leave_every_bucket_a_listpack(ctx: Context) -> None:
    """A sorted set that once passed 128 members stays a skiplist when it shrinks:
    a bucket filled in bulk is written again whole instead of split after."""
    rng = random.Random(3)
    for start in (1, 3001, 6001):
        ctx.mirror.add_new(
            "git", [in_pool(i, round(rng.uniform(0, 1e6), 6)) for i in range(start, start + 3000)]
        )

    assert_well_formed(ctx)
    assert ctx.mirror.sizes("git")["lagging"] == 9000
    for key in pool_buckets(ctx.mirror, "git", "lagging"):
        assert ctx.mirror.client.object("encoding", key) == b"listpack"


def test_a_final_status_ending_a_flight_looks_for_no_pool_bucket(ctx: Context) -> None:
    now_s = 1e9
    ctx.mirror.place(
        "git", [Placement(i, "pool", now_s + i, "lagging", now_s + i, 1) for i in range(50)]
    )
    sent = [Placement(i, "inflight", now_s, "lagging", now_s + i, 2) for i in range(50)]
    ctx.mirror.place("git", sent)
    ctx.mirror.client.config_resetstat()
    rested = [Placement(i, "cooling", now_s + 3600, "lagging", now_s + i, 3) for i in range(50)]
    assert ctx.mirror.place("git", rested) == 50
    stats = ctx.mirror.client.info("commandstats")
    assert "cmdstat_zrange" not in stats  # no bucket looked up: an origin is in one place
    assert ctx.mirror.sizes("git") == {
        "never_visited": 0,
        "lagging": 0,
        "no_last_update": 0,
        "up_to_date": 0,
        "inflight": 0,
        "cooling": 50,
    }
