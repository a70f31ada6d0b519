"""Splitting a pop over a visit type's shards (queues.shards), without Redis."""

from hypothesis import given
from hypothesis import strategies as st

from app.domain.placement import Placement
from queues.keys import VisitTypeKeys, hash_tag, shard_of
from queues.shards import (
    DueRank,
    Popped,
    PopResult,
    by_shard,
    due_split,
    first_visit_parts,
    pop_across,
    split_count,
)


def test_a_pop_is_split_in_proportion_to_the_shards_sizes() -> None:
    assert split_count(60, [100, 200, 300]) == [10, 20, 30]


def test_the_remainder_goes_to_the_largest_fractions() -> None:
    assert split_count(10, [1, 1, 1]) == [1, 1, 1]
    assert split_count(2, [5, 5, 5]) == [1, 1, 0]


@given(st.integers(0, 500), st.lists(st.integers(0, 1000), min_size=1, max_size=8))
def test_a_split_never_asks_a_shard_for_more_than_it_holds_and_sums_up(
    count: int, sizes: list[int]
) -> None:
    parts = split_count(count, sizes)

    assert sum(parts) == min(count, sum(sizes))
    assert all(0 <= part <= size for part, size in zip(parts, sizes, strict=True))


def test_shard_zero_keeps_the_visit_types_hash_tag_and_others_get_their_own() -> None:
    assert VisitTypeKeys("revisit", "git").inflight == "revisit:{git}:inflight"
    assert VisitTypeKeys("revisit", "git", shard=2).inflight == "revisit:{git#2}:inflight"
    assert hash_tag("git", 2) == "{git#2}"


def test_origins_are_grouped_by_shard_in_their_order() -> None:
    placements = [Placement(i, "pool", 0.0, "up_to_date", 0.0) for i in (5, 3, 4, 6)]

    groups = by_shard(placements, 3)

    assert {k: [p.id for p in v] for k, v in groups.items()} == {2: [5], 0: [3, 6], 1: [4]}
    assert shard_of(7, 1) == 0


def test_a_sharded_pop_counts_the_origins_its_refill_pops_brought_back() -> None:
    # Shard 1 is dry; shard 0 gave its share and is asked for the shortfall.
    # Past a pop's move limit, origins still come back from cooling and from
    # lost visits in that second pop: they count as returned.
    replies = [
        PopResult([Popped(2, "lagging", 1.0), Popped(4, "lagging", 2.0)], 5, 1),
        PopResult([], 0, 2),
        PopResult([Popped(6, "lagging", 3.0), Popped(8, "lagging", 4.0)], 7, 3),
    ]
    calls: list[tuple[int, int]] = []

    def pop_from(shard: int, n: int) -> PopResult:
        calls.append((shard, n))
        return replies[len(calls) - 1]

    result = pop_across(pop_from, [2, 2], 4, peek=False, returned=(1, 1))

    assert calls == [(0, 2), (1, 2), (0, 2)]
    assert [p.id for p in result.popped] == [2, 4, 6, 8]
    assert (result.cooled, result.lost) == (1 + 5 + 7, 1 + 1 + 2 + 3)


def test_a_batchs_first_visits_are_shared_by_where_never_visited_origins_wait() -> None:
    assert first_visit_parts(100, [0, 30, 10]) == [0.0, 75.0, 25.0]
    assert first_visit_parts(100, [0, 0, 0]) == [0.0, 0.0, 0.0]


def test_a_due_split_gives_each_shard_its_first_visits_then_its_part_of_the_merge() -> None:
    ranks = [
        DueRank(0, [50.0, 60.0, 70.0], 1, 0),
        DueRank(2, [10.0, 20.0, 90.0], 0, 2),
        DueRank(1, [], 3, 0),
    ]

    asked = due_split(lambda shard: ranks[shard], 3, 8)

    # 3 first visits, then the 5 origins due first across the shards
    assert asked == ([0 + 3, 2 + 2, 1 + 0], 4, 2)


def test_a_due_split_never_asks_for_more_first_visits_than_the_batch() -> None:
    ranks = [DueRank(1, [5.0], 0, 0), DueRank(1, [6.0], 0, 0), DueRank(1, [], 0, 0)]

    asked, _, _ = due_split(lambda shard: ranks[shard], 3, 2)

    assert asked == [1, 1, 0]
