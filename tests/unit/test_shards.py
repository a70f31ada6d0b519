"""Splitting a pop over a visit type's shards (queues.shards), without Redis."""

from hypothesis import given
from hypothesis import strategies as st

from app.domain.placement import Placement
from queues.keys import VisitTypeKeys, hash_tag, shard_of
from queues.shards import by_shard, split_count


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
