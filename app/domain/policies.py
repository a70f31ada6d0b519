"""Scheduling policies (seed 002) and how a batch is shared between them (seed 000).

Each visit type has a list of (policy, weight); ``REGISTRY`` says what each
policy is. Four policies read a pool of the Redis mirror directly;
``seed000_mixing`` shares the batch between the four pools by their sizes
(r = #B / (#A + #B): (1 - r) n from the pool without last_update, r n / 3
from each of the three others). The split itself, with the share of a dry pool
handed to the others, is done atomically in ``queues/lua/pop.lua``: that
script is the one copy of the mixing rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from app.domain.placement import POOLS, PoolName
from app.domain.visit_stats import Spacing

Picks = Literal["pool", "query", "mix", "due"]


@dataclass(frozen=True)
class Policy:
    """One scheduling policy: the one place that says how it picks a batch and how
    the visits of a visit type it serves are spaced.

    ``picks``: ``pool`` pops one pool of the mirror (``pool``) by weight;
    ``query`` ranks candidates in PostgreSQL (the named query
    ``candidates_<name>``) and claims those waiting in a pool; ``mix`` lets
    ``queues/lua/pop.lua`` share the batch between the pools by their sizes
    (seed 000); ``due`` pops every pool in order of due time. ``mix`` and
    ``due`` decide every share, so they take no other policy beside them.
    ``plans_capacity``: each step also counts its picks and lateness, keeps
    the age-optimal allocation in step with the capacity and re-plans a slice
    of targets (``app.services.allocation``, ``app.services.replan``).
    """

    name: str
    picks: Picks
    pool: PoolName | None = None
    spacing: Spacing = "ladder"
    plans_capacity: bool = False

    @property
    def exclusive(self) -> bool:
        """Whether the policy decides every share and takes no other beside it."""
        return self.picks in ("mix", "due")


#: Every policy revisit implements, by name.
REGISTRY: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("never_visited_oldest_update_first", "pool", pool="never_visited"),
        Policy("already_visited_order_by_lag", "pool", pool="lagging"),
        Policy("origins_without_last_update", "pool", pool="no_last_update"),
        Policy("up_to_date_by_next_visit_target", "pool", pool="up_to_date"),
        Policy("oldest_scheduled_first", "query"),
        Policy("stop_after_success", "query"),
        Policy("seed000_mixing", "mix"),
        Policy("age_optimal", "due", spacing="age_optimal", plans_capacity=True),
    )
}
POLICIES = frozenset(REGISTRY)
#: The policies served straight from one pool, and their pool.
POOL_OF_POLICY: dict[str, PoolName] = {p.name: p.pool for p in REGISTRY.values() if p.pool}
MIXING = "seed000_mixing"
AGE_OPTIMAL = "age_optimal"

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
    for name in policies:
        if REGISTRY[name].exclusive and len(policies) > 1:
            raise UnknownPolicy(f"policy: {name} decides every share and cannot be combined")


def pool_weights(policies: Mapping[str, float]) -> list[float] | str:
    """Weights of the four pools (POOLS order) for the pop script, or 'auto'
    (seed 000's mixing), or 'due' (every pool by due time)."""
    check_policies(policies)
    picks = {REGISTRY[name].picks for name in policies}
    if "due" in picks:
        return "due"
    if "mix" in picks:
        return "auto"
    weights = dict.fromkeys(POOLS, 0.0)
    for name, weight in policies.items():
        pool = REGISTRY[name].pool
        if pool is not None:
            weights[pool] += weight
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
    return {name: n for name, n in shares.items() if REGISTRY[name].picks == "query" and n > 0}


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
    spacings = {REGISTRY[name].spacing for name in policies if name in REGISTRY}
    return "age_optimal" if "age_optimal" in spacings else "ladder"


def plans_capacity(policies: Mapping[str, float]) -> bool:
    """Whether a step of a visit type with these policies plans its capacity."""
    return any(REGISTRY[name].plans_capacity for name in policies if name in REGISTRY)


def policy_of_pool(policies: Mapping[str, float], pool: PoolName) -> str:
    """Which policy a pick from ``pool`` is credited to (for metrics and dry runs)."""
    for name in policies:
        if REGISTRY[name].exclusive:
            return name
    for name, weight in policies.items():
        if REGISTRY[name].pool == pool and weight > 0:
            return name
    return "fallback"
