import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.policies import (
    MIXING,
    UnknownPolicy,
    default_policies,
    policy_of_pool,
    pool_weights,
    query_shares,
    reference_policies,
)


def test_the_default_for_every_visit_type_is_age_optimal_served_by_due_time() -> None:
    for visit_type in ("git", "hg", "svn", "pypi"):
        assert default_policies(visit_type) == {"age_optimal": 1.0}
        assert pool_weights(default_policies(visit_type)) == "due"


def test_reference_weights_map_to_pool_weights() -> None:
    assert reference_policies("git") == {
        "already_visited_order_by_lag": 49.0,
        "never_visited_oldest_update_first": 49.0,
        "origins_without_last_update": 2.0,
    }
    # POOLS order: never_visited, lagging, no_last_update, up_to_date
    assert pool_weights(reference_policies("git")) == [49.0, 49.0, 2.0, 0.0]
    assert pool_weights(reference_policies("pypi")) == [40.0, 40.0, 20.0, 0.0]


def test_mixing_lets_the_pop_script_size_the_pools() -> None:
    assert pool_weights({MIXING: 1}) == "auto"


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ({"fastest_first": 1.0}, "unknown policy 'fastest_first'"),
        ({"stop_after_success": -1.0}, "stop_after_success=-1.0 is not a number between 0"),
        ({"stop_after_success": math.inf}, "stop_after_success=inf is not a number"),
        ({"stop_after_success": math.nan}, "stop_after_success=nan is not a number"),
        ({"stop_after_success": 1e308}, "between 0 and 1e\\+06"),
        ({"stop_after_success": 0.0, "oldest_scheduled_first": 0.0}, "every weight is 0"),
        ({}, "at least one POLICY=WEIGHT"),
        ({MIXING: 1.0, "stop_after_success": 1.0}, "cannot be combined"),
    ],
)
def test_bad_policy_configuration_is_refused(policies: dict[str, float], message: str) -> None:
    with pytest.raises(UnknownPolicy, match=message):
        pool_weights(policies)


def test_query_policies_get_their_share_by_largest_remainder() -> None:
    policies = {
        "oldest_scheduled_first": 1.0,
        "stop_after_success": 1.0,
        "origins_without_last_update": 1.0,
    }
    # 10 / 3 each; the spare slot goes to the first name among equal remainders.
    assert query_shares(policies, 10) == {"oldest_scheduled_first": 4, "stop_after_success": 3}
    assert query_shares(policies, 0) == {}
    assert query_shares({"origins_without_last_update": 1.0}, 50) == {}


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "oldest_scheduled_first",
                "stop_after_success",
                "already_visited_order_by_lag",
                "origins_without_last_update",
            ]
        ),
        st.floats(0, 100),
        min_size=1,
    ).filter(lambda weights: any(weights.values())),
    st.integers(0, 5000),
)
def test_query_shares_never_exceed_the_slots(policies: dict[str, float], slots: int) -> None:
    shares = query_shares(policies, slots)
    assert sum(shares.values()) <= slots
    assert all(n > 0 for n in shares.values())


def test_a_pick_is_credited_to_the_policy_of_its_pool() -> None:
    policies = reference_policies("git")
    assert policy_of_pool(policies, "lagging") == "already_visited_order_by_lag"
    assert policy_of_pool(policies, "up_to_date") == "fallback"
    assert policy_of_pool({MIXING: 1}, "lagging") == MIXING
