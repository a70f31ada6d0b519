from hypothesis import given
from hypothesis import strategies as st

from queues.sorted_runs import SortedRuns

PAIRS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.floats(allow_nan=False),
        st.integers(min_value=1, max_value=10**9).map(str),
    )
)


@given(PAIRS, st.integers(min_value=1, max_value=20))
def test_each_pool_comes_back_by_score_then_member_text_whatever_the_runs_spilled(
    added: list[tuple[str, float, str]], run: int
) -> None:
    runs = SortedRuns(run)
    for pool, score, member in added:
        runs.add(pool, score, member)
    for pool in "abc":
        pairs = [(score, member) for p, score, member in added if p == pool]
        assert runs.count(pool) == len(pairs)
        assert list(runs.ordered(pool)) == sorted(pairs)
    runs.close()


def test_equal_scores_order_members_as_text_as_redis_does() -> None:
    runs = SortedRuns(2)
    for member in ["9", "10", "100", "2", "11"]:
        runs.add("pool", 1.5, member)
    assert [m for _, m in runs.ordered("pool")] == ["10", "100", "11", "2", "9"]
    runs.close()
