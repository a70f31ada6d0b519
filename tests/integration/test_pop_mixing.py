"""The weighted pop (queues/lua/pop.lua) against the real Redis."""

from datetime import UTC, datetime

import pytest

from app.domain.placement import POOLS, Placement
from app.services.context import Context
from queues.mirror import Mirror, MirrorClient

pytestmark = pytest.mark.every_mirror

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


def test_batch_is_split_by_weight(ctx: Context) -> None:
    mirror = ctx.mirror
    fill(mirror, {"never_visited": 500, "lagging": 500, "no_last_update": 500, "up_to_date": 500})
    assert taken(mirror, 100, [49, 49, 2, 0]) == {
        "never_visited": 49,
        "lagging": 49,
        "no_last_update": 2,
        "up_to_date": 0,
    }


def test_share_of_a_dry_pool_goes_to_the_others(ctx: Context) -> None:
    mirror = ctx.mirror
    fill(mirror, {"never_visited": 10, "lagging": 500, "no_last_update": 500})
    got = taken(mirror, 100, [49, 49, 2, 0])
    assert got["never_visited"] == 10
    assert sum(got.values()) == 100
    assert got["lagging"] > got["no_last_update"] > 2


def test_weight_zero_pools_fill_the_slots_nothing_else_can(ctx: Context) -> None:
    mirror = ctx.mirror
    fill(mirror, {"lagging": 3, "up_to_date": 50})
    assert taken(mirror, 20, [49, 49, 2, 0]) == {
        "never_visited": 0,
        "lagging": 3,
        "no_last_update": 0,
        "up_to_date": 17,
    }


def test_seed_000_mixing_takes_one_minus_r_from_group_a(ctx: Context) -> None:
    mirror = ctx.mirror
    # #A = 600, #B = 300 + 150 + 150 = 600 -> r = 1/2: 50 from A, 50/3 from each B pool.
    fill(mirror, {"no_last_update": 600, "never_visited": 300, "lagging": 150, "up_to_date": 150})
    got = taken(mirror, 100, "auto")
    assert got["no_last_update"] == 50
    assert sorted([got["never_visited"], got["lagging"], got["up_to_date"]]) == [16, 17, 17]


def test_pop_takes_the_lowest_scores_and_peek_moves_nothing(ctx: Context) -> None:
    client = ctx.mirror.client
    mirror = Mirror(client, "t")
    fill(mirror, {"lagging": 10})
    peeked = mirror.pop("git", 3, NOW, 86400.0, [0, 1, 0, 0], peek=True)
    assert [p.score for p in peeked.popped] == [0.0, 1.0, 2.0]
    assert mirror.sizes("git")["lagging"] == 10
    popped = mirror.pop("git", 3, NOW, 86400.0, [0, 1, 0, 0])
    assert [p.id for p in popped.popped] == [p.id for p in peeked.popped]
    assert mirror.sizes("git")["inflight"] == 3


def _mark_built(client: MirrorClient, mirror: Mirror) -> None:
    client.hset(mirror.keys("git").meta, "rebuilt_at", NOW)


def test_weights_hold_over_many_small_batches(ctx: Context) -> None:
    client = ctx.mirror.client
    mirror = Mirror(client, "t")
    fill(mirror, {"never_visited": 500, "lagging": 500, "no_last_update": 500})
    _mark_built(client, mirror)
    total = dict.fromkeys(POOLS, 0)
    for _ in range(50):  # 50 batches of 8: 2 % of 400 is 8 visits
        for pool, count in taken(mirror, 8, [49, 49, 2, 0]).items():
            total[pool] += count
    # Per batch the 2 % share rounds to 0; carried over, it is paid within a slot.
    assert abs(total["no_last_update"] - 8) <= 1
    assert abs(total["never_visited"] - 196) <= 1 and abs(total["lagging"] - 196) <= 1
    assert sum(total.values()) == 400


def test_age_optimal_pop_takes_the_origins_due_first_across_pools(ctx: Context) -> None:
    mirror = ctx.mirror
    day = 86400.0
    mirror.add_new(
        "git",
        [
            Placement(1, "pool", NOW - 3 * day, "never_visited", NOW - 3 * day),
            Placement(2, "pool", -5 * day, "lagging", -5 * day),  # due 5 days ago
            Placement(3, "pool", NOW - 1 * day, "no_last_update", NOW - 1 * day),
            Placement(4, "pool", NOW + 2 * day, "no_last_update", NOW + 2 * day),
            Placement(5, "pool", NOW - 4 * day, "up_to_date", NOW - 4 * day),
            Placement(6, "pool", NOW + 1 * day, "up_to_date", NOW + 1 * day),
        ],
    )
    first = mirror.pop("git", 3, NOW, day, "due", peek=True)
    assert {p.id for p in first.popped} == {2, 5, 1}
    popped = mirror.pop("git", 10, NOW, day, "due")
    # Due: lagging (-5 d), up_to_date (-4 d), never_visited (-3 d),
    # no_last_update (-1 d, then +2 d: not due yet, but a free slot is better
    # used on it than left empty); the up_to_date origin not due is left: the
    # forge says it has not changed, so its visit would be useless.
    assert sorted(p.id for p in popped.popped) == [1, 2, 3, 4, 5]
    assert mirror.sizes("git")["up_to_date"] == 1


def test_age_optimal_pop_takes_a_reported_change_at_its_due_time_among_planned_visits(
    ctx: Context,
) -> None:
    mirror = ctx.mirror
    day = 86400.0
    mirror.add_new(
        "git",
        [
            # due times (age_optimal's delay after the change): one in two days,
            # one two days ago; beside them a lag order score (-lag, due 1 d ago)
            Placement(1, "pool", NOW + 2 * day, "lagging", NOW + 2 * day),
            Placement(2, "pool", NOW - 2 * day, "lagging", NOW - 2 * day),
            Placement(3, "pool", -1 * day, "lagging", -1 * day),
            Placement(4, "pool", NOW - 3 * day, "no_last_update", NOW - 3 * day),
            Placement(5, "pool", NOW - 0.5 * day, "no_last_update", NOW - 0.5 * day),
        ],
    )
    first = mirror.pop("git", 3, NOW, day, "due", peek=True)
    # planned -3 d, reported -2 d, lag -1 d go before the planned -0.5 d and
    # the reported change not due for two days
    assert {p.id for p in first.popped} == {4, 2, 3}
    popped = mirror.pop("git", 5, NOW, day, "due")
    # with slots to spare, the change not yet due is taken rather than none
    assert sorted(p.id for p in popped.popped) == [1, 2, 3, 4, 5]


def test_age_optimal_pop_keeps_a_share_of_each_batch_for_first_visits(ctx: Context) -> None:
    mirror = ctx.mirror
    client: MirrorClient = mirror.client
    client.hset(mirror.keys("git").meta, "rebuilt_at", NOW)  # credits are kept while built
    day = 86400.0
    backlog = [
        Placement(i, "pool", NOW - 10 * day + i, "lagging", NOW - 10 * day + i)
        for i in range(1, 101)
    ]
    new = [
        Placement(i, "pool", NOW - day + i, "never_visited", NOW - day + i) for i in range(101, 121)
    ]
    mirror.add_new("git", backlog + new)

    def first_visits(count: int, share: float) -> list[int]:
        popped = mirror.pop("git", count, NOW, day, "due", first_visit_share=share)
        return [p.id for p in popped.popped if p.pool == "never_visited"]

    # without a share the backlog, due earlier, takes every slot
    assert first_visits(10, 0.0) == []
    # 0.2 of a batch of 10: the two oldest first visits
    assert first_visits(10, 0.2) == [101, 102]
    # 0.15 of 10 is 1.5: the half slot owed is carried, 1, 2, 1, 2
    assert [len(first_visits(10, 0.15)) for _ in range(4)] == [1, 2, 1, 2]
    # the pool runs dry: it is owed nothing afterwards
    assert len(first_visits(100, 0.5)) == 12  # the 20 less the 8 taken
    assert float(client.hget(mirror.keys("git").meta, "credit:first") or 0) == 0.0


def test_overloaded_age_optimal_pop_takes_floor_visits_the_forge_calls_useless_last(
    ctx: Context,
) -> None:
    mirror = ctx.mirror
    day = 86400.0
    margin = 6.4 * day
    mirror.add_new(
        "git",
        [
            # floor visits of origins whose forge reports no change, 20 days late
            Placement(1, "pool", NOW - 20 * day, "up_to_date", NOW - 20 * day),
            Placement(2, "pool", NOW - 19 * day, "up_to_date", NOW - 19 * day),
            # reported changes and a rate guess, due after them
            Placement(3, "pool", NOW - 10 * day, "lagging", NOW - 10 * day),
            Placement(4, "pool", NOW - 2 * day, "lagging", NOW - 2 * day),
            Placement(5, "pool", NOW - 5 * day, "no_last_update", NOW - 5 * day),
            # a reported change not due yet
            Placement(6, "pool", NOW + day, "lagging", NOW + day),
        ],
    )

    def taken(count: int, margin_s: float) -> list[int]:
        popped = mirror.pop("git", count, NOW, day, "due", peek=True, overload_margin_s=margin_s)
        return sorted(p.id for p in popped.popped)

    # not overloaded: every pool by due time, the floor visits first
    assert taken(2, 0.0) == [1, 2]
    # overloaded: every visit already due goes first, whatever the backlog of
    # targets (20 days, under a margin of 25 or past one of 6.4): reported
    # changes due by the latest change show in no target
    assert taken(3, 25 * day) == [3, 4, 5]
    assert taken(3, margin) == [3, 4, 5]
    # ranked as due now: after those, before a change not due yet
    ranked = mirror.due_order("git", 0, 6, NOW, day, peek=True, overload_margin_s=margin)
    assert ranked.dues == [NOW - 10 * day, NOW - 5 * day, NOW - 2 * day, NOW, NOW, NOW + day]
