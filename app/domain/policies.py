"""Scheduling policies (seed 002) and how a batch is shared between them (seed 000).

Each visit type has a list of (policy, weight). Four policies read a pool of
the Redis mirror directly; ``seed000_mixing`` shares the batch between the four
pools by their sizes (r = #B / (#A + #B): (1 - r) n from the pool without
last_update, r n / 3 from each of the three others). The split itself, with
the share of a dry pool handed to the others, is done atomically in
``queues/lua/pop.lua``: that script is the one copy of the mixing rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from app.domain.placement import POOLS, PoolName
from app.domain.visit_stats import Spacing

#: Policies served straight from one pool of the mirror.
POOL_OF_POLICY: dict[str, PoolName] = {
    "never_visited_oldest_update_first": "never_visited",
    "already_visited_order_by_lag": "lagging",
    "origins_without_last_update": "no_last_update",
    "up_to_date_by_next_visit_target": "up_to_date",
}
#: Policies whose order is not a pool's: Postgres ranks candidates (with an
#: index each), the mirror claims those that wait in a pool.
QUERY_POLICIES = frozenset({"oldest_scheduled_first", "stop_after_success"})
#: seed 000's automatic mixing of the four pools.
MIXING = "seed000_mixing"
#: Every pool served in order of due time, visits spaced by learned change
#: rates under the age-optimal allocation (app.domain.allocation).
AGE_OPTIMAL = "age_optimal"
#: Policies that decide every share themselves and take no other policy beside.
EXCLUSIVE = frozenset({MIXING, AGE_OPTIMAL})
POLICIES = frozenset({*POOL_OF_POLICY, *QUERY_POLICIES, *EXCLUSIVE})

#: The reference scheduler's defaults (swh-scheduler): 49/49/2 for git, hg, svn.
REFERENCE_DEFAULTS: dict[str, float] = {
    "already_visited_order_by_lag": 49.0,
    "never_visited_oldest_update_first": 49.0,
    "origins_without_last_update": 2.0,
}
#: ... and 40/40/20 for the other visit types.
REFERENCE_DEFAULTS_OTHER: dict[str, float] = {
    "already_visited_order_by_lag": 40.0,
    "never_visited_oldest_update_first": 40.0,
    "origins_without_last_update": 20.0,
}


#: Largest weight: weights are relative shares, so a larger one only invites
#: overflow in the share arithmetic.
MAX_WEIGHT = 1_000_000.0


class UnknownPolicy(ValueError):
    """A policy name revisit does not implement; the text lists the known ones."""


def check_policies(policies: Mapping[str, float]) -> None:
    """Refuse what would make the scheduler's shares meaningless: unknown
    policies, weights that are not finite numbers between 0 and MAX_WEIGHT, no
    weight above 0, and mixing combined with others."""
    if not policies:
        raise UnknownPolicy("policy: at least one POLICY=WEIGHT is needed")
    for name, weight in policies.items():
        if name not in POLICIES:
            known = ", ".join(sorted(POLICIES))
            raise UnknownPolicy(f"policy: unknown policy {name!r} (known: {known})")
        if not math.isfinite(weight) or not 0 <= weight <= MAX_WEIGHT:
            raise UnknownPolicy(
                f"weight: {name}={weight} is not a number between 0 and {MAX_WEIGHT:g}"
            )
    if not any(policies.values()):
        raise UnknownPolicy("weight: every weight is 0; at least one must be above 0")
    for name in EXCLUSIVE & set(policies):
        if len(policies) > 1:
            raise UnknownPolicy(f"policy: {name} decides every share and cannot be combined")


def pool_weights(policies: Mapping[str, float]) -> list[float] | str:
    """Weights of the four pools (POOLS order) for the pop script, or 'auto'
    (seed 000's mixing), or 'due' (every pool by due time)."""
    check_policies(policies)
    if AGE_OPTIMAL in policies:
        return "due"
    if MIXING in policies:
        return "auto"
    weights = dict.fromkeys(POOLS, 0.0)
    for name, weight in policies.items():
        if name in POOL_OF_POLICY:
            weights[POOL_OF_POLICY[name]] += weight
    return [weights[pool] for pool in POOLS]


def query_shares(policies: Mapping[str, float], slots: int) -> dict[str, int]:
    """How many of ``slots`` each query policy gets (largest remainder); the rest,
    and whatever a query policy cannot fill, goes to the pools."""
    check_policies(policies)
    total = sum(policies.values())
    if total <= 0 or slots <= 0:
        return {}
    exact = {name: slots * w / total for name, w in policies.items()}
    shares = {name: int(x) for name, x in exact.items()}
    spare = slots - sum(shares.values())
    for name in sorted(exact, key=lambda n: (shares[n] - exact[n], n))[:spare]:
        shares[name] += 1
    return {name: n for name, n in shares.items() if name in QUERY_POLICIES and n > 0}


#: revisit's default for every visit type with no policy configured: visits
#: spaced by learned change rates under the age-optimal allocation of the
#: capacity (benchmarks/simulate.md has the figures that made it the default).
DEFAULT_POLICIES: dict[str, float] = {AGE_OPTIMAL: 1.0}


def reference_policies(visit_type: str) -> dict[str, float]:
    """The reference scheduler's default weights for a visit type (49/49/2 for git,
    hg and svn, 40/40/20 for the others): what an operator moving from it had."""
    if visit_type in ("git", "hg", "svn"):
        return dict(REFERENCE_DEFAULTS)
    return dict(REFERENCE_DEFAULTS_OTHER)


def default_policies(visit_type: str) -> dict[str, float]:
    """The policies of a visit type with none configured (the same for every one)."""
    return dict(DEFAULT_POLICIES)


def spacing_of(policies: Mapping[str, float]) -> Spacing:
    """How the journal spaces the visits of a visit type with these policies."""
    return "age_optimal" if AGE_OPTIMAL in policies else "ladder"


def policy_of_pool(policies: Mapping[str, float], pool: PoolName) -> str:
    """Which policy a pick from ``pool`` is credited to (for metrics and dry runs)."""
    for name in EXCLUSIVE & set(policies):
        return name
    for name, p in POOL_OF_POLICY.items():
        if p == pool and policies.get(name, 0) > 0:
            return name
    return "fallback"
