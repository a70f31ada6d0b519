"""The age-optimal spacing of an origin's visits under a fixed capacity (pure math).

An origin changing as a Poisson process of rate λ and visited every I seconds
has a time-averaged age (time since the first change the archive misses)

    A(λ, I) = I/2 - 1/λ + (1 - e^{-λI}) / (λ² I)

(Cho & Garcia-Molina, "Effective page refresh policies for web crawlers",
ACM TODS 28(4), 2003). Minimising Σ A_i under Σ 1/I_i = C (the visits the
workers can make per second) is a convex problem: at the optimum every origin
has the same marginal gain of a visit, which gives (Lagrange multiplier μ)

    h(λ I) = μ λ²,   h(x) = x²/2 - 1 + (1 + x) e^{-x}

h rises from 0, so each origin's interval is I = h⁻¹(μ λ²) / λ: fast
changers tend to a common interval √(2μ), slow ones to (3μ/λ)^{1/3}, and an
origin that never changes only gets the floor. Every live origin also gets at
least one visit per ``floor_s`` (the visit type's ``max_interval``), which
caps I. μ is set by water-filling: the largest interval scale whose visits
the capacity can pay for (``multiplier_for_capacity``), recomputed as workers
come and go. This module is the one copy of that rule; the simulator's
``oracle`` baseline plans with it from the true rates.

Known changes before guesses: a change the forge reports is planned as if
the workers had room to spare, with μ at its lower clamp ``soon²/2``
(``soon`` the visit type's ``min_interval``), whatever μ the rate guesses
are planned with (``known_change_delay_s``). A rate guess can wait as long as
the capacity asks, up to the floor; a reported change is due at most ``soon``
after the first change the archive misses, and a rare one hardly at all:
the origins whose forge reports their changes are never left behind the
others' guesses.

Quiet origins first: once μ passes a cap, ``bound²/2`` (``bound`` the
floor's margin, ``max_interval`` less the floor: the workers cannot visit
even the fastest changers within it), the changes the forges report are
more than the workers can fetch, and a visit costs worker time in proportion
to the changes it fetches. The delay is then counted from the *latest*
reported change instead of the first missed one (a negative delay says so,
``counts_from_latest_change``; ``app.domain.placement`` reads it), and a
reported change is due by that alone, not by the floor: an origin that
stopped changing long ago goes first, where one visit, fetching little,
brings it up to date for long; an origin that keeps changing, whose visits
fetch the most and leave it stale again at once, waits until it has been
quiet for the delay. Those busy origins are the reported changes left behind
under overload, and their floor is what degrades: they go past
``max_interval`` while they keep changing faster than the workers can follow.

The floor under overload: the scheduler serves every pool by due time
(``queues/lua/pop.lua``), so when the workers cannot make every visit due,
floor visits and reported changes wait behind those due before them, by the
same backlog (the schedule drift). The floor holds while that backlog is
under its margin (``max_interval`` less the floor) and beyond it stretches
to floor + backlog: obligations are served in the order they fell due, but
two give way. Past the cap on μ (above), an origin whose forge reports
changes is due by its latest change alone: one that keeps changing has no
floor. And past that same cap (``past_known_change_cap``), a floor visit of
an origin whose forge reports no change since its last visit (the
``up_to_date`` pool) counts as due now, after every visit already due: a
visit the forge says would find nothing gives way to reported changes
first, which would otherwise wait behind it now that they are due by their
latest change. The rate guesses of origins without ``last_update`` keep
their floor + backlog.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

_SMALL_X = 1e-3
_NEWTON_STEPS = 50
_BISECTIONS = 100
_TOLERANCE = 1e-7  # relative precision of μ


def age_gain(x: float) -> float:
    """h(x) = x²/2 - 1 + (1 + x) e^{-x}, by its series where the closed form cancels."""
    if x < _SMALL_X:
        return x**3 / 3 - x**4 / 8
    return x * x / 2 - 1 + (1 + x) * math.exp(-x)


def _inverse_age_gain(y: float) -> float:
    """x ≥ 0 with h(x) = y (Newton's method from the two asymptotes)."""
    if y <= 0:
        return 0.0
    x = (3 * y) ** (1 / 3) if y < 1 else math.sqrt(2 * (y + 1))
    for _ in range(_NEWTON_STEPS):
        slope = x * -math.expm1(-x)
        if slope <= 0:
            break
        step = (age_gain(x) - y) / slope
        x = max(x - step, x / 2)
        if abs(step) <= 1e-12 * max(x, 1e-300):
            break
    return x


def optimal_interval_s(rate_per_s: float, multiplier_s2: float, floor_s: float) -> float:
    """The age-optimal interval between visits for a change rate, capped by the floor."""
    if rate_per_s <= 0 or not math.isfinite(multiplier_s2):
        return floor_s
    interval = _inverse_age_gain(multiplier_s2 * rate_per_s * rate_per_s) / rate_per_s
    return min(interval, floor_s)


def visits_per_s(
    rates: Iterable[tuple[float, float]], multiplier_s2: float, floor_s: float
) -> float:
    """Visits per second the intervals of μ cost, over (rate, count) classes."""
    return sum(count / optimal_interval_s(rate, multiplier_s2, floor_s) for rate, count in rates)


def multiplier_for_capacity(
    rates: Iterable[tuple[float, float]], capacity_per_s: float, floor_s: float
) -> float:
    """The μ (s²) whose intervals use ``capacity_per_s`` visits a second.

    ``rates`` are (rate per second, number of origins) classes, e.g. a
    histogram. When the capacity cannot even pay for the floor, μ is infinite:
    every origin gets the floor. Geometric bisection: visits fall as μ grows.
    """
    classes = [(r, c) for r, c in rates if c > 0]
    if floor_s <= 0:
        raise ValueError(f"floor_s: must be positive, got {floor_s}")
    if not classes or capacity_per_s <= visits_per_s(classes, math.inf, floor_s):
        return math.inf
    lo, hi = 1e-6, 1e30
    for _ in range(_BISECTIONS):
        if hi <= lo * (1 + _TOLERANCE):
            break
        mid = math.sqrt(lo * hi)
        if visits_per_s(classes, mid, floor_s) > capacity_per_s:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def lateness_reference_s(multiplier_s2: float, floor_s: float) -> float:
    """The interval lateness is measured against: the common interval of the fastest
    changers, sqrt(2 μ), at most the floor."""
    return min(math.sqrt(2 * multiplier_s2), floor_s)


def corrected_multiplier(
    multiplier_s2: float,
    lateness_s: float,
    weight: float,
    floor_s: float,
    min_interval_s: float,
) -> float:
    """μ corrected by how late the planned visits were served.

    The capacity a multiplier is solved for is measured in visits, but visits
    cost worker time that grows with the changes they fetch, and the known
    changes the forges report take their share first: the capacity left to
    planned visits is only known by serving them. So, as a controller, μ grows
    when planned visits are served after their targets (more were planned than
    the workers can make) and shrinks when they are served early (the workers
    had room), by a factor exp(weight · lateness / reference interval), the
    ratio clamped to ±1. At equilibrium
    planned visits are made when due: the allocation spends the capacity. μ
    stays where it still moves something: √(2 μ) between the minimum interval
    and the floor.
    """
    if not math.isfinite(multiplier_s2) or multiplier_s2 <= 0:
        return multiplier_s2
    reference = lateness_reference_s(multiplier_s2, floor_s)
    ratio = max(-1.0, min(1.0, lateness_s / reference))
    corrected = multiplier_s2 * math.exp(weight * ratio)
    low, high = min_interval_s**2 / 2, floor_s**2 / 2
    return max(low, min(high, corrected))


def reported_change_delay_s(rate_per_s: float, multiplier_s2: float, floor_s: float) -> float:
    """How long after its first missed change an origin whose forge reports its
    changes is best visited, under the multiplier μ of the other origins.

    With changes reported, a visit can wait for a change and then for a delay
    τ: a cycle is the wait for the change (1/λ on average, age 0) then τ of age
    growing from 0, so the mean age is (τ²/2) / (1/λ + τ) at 1 / (1/λ + τ)
    visits per unit of time. Minimising age + μ visits, as the intervals of
    ``optimal_interval_s`` do, gives τ²/2 + τ/λ = μ:

        τ = sqrt(1/λ² + 2 μ) - 1/λ

    A rare change is worth chasing at once (τ → μ λ); a fast changer waits the
    common interval of the fastest changers, sqrt(2 μ), as if its changes were
    not reported. At most the floor; 0 for an origin not known to change."""
    if not math.isfinite(multiplier_s2):
        return floor_s
    if rate_per_s <= 0 or multiplier_s2 <= 0:
        return 0.0
    mean_wait = 1 / rate_per_s
    # the same root, without the cancellation of sqrt(a² + b) - a for a small b
    delay = 2 * multiplier_s2 / (math.sqrt(mean_wait * mean_wait + 2 * multiplier_s2) + mean_wait)
    return min(delay, floor_s)


def known_change_delay_s(
    rate_per_s: float, multiplier_s2: float, floor_s: float, bound_s: float, soon_s: float
) -> float:
    """``reported_change_delay_s`` with μ at most ``soon_s²/2`` while μ is under
    the cap ``bound_s²/2``: at most ``soon_s`` and, for a change rarer than
    that, about λ soon²/2, however high the rate guesses' μ has gone (known
    changes before guesses, the module's docstring).

    Past the cap (infinite μ included: the capacity cannot even pay for the
    floor) the delay is the one of μ = ``bound_s²/2``, at most ``bound_s``,
    negated (at least a second): it counts from the latest reported change,
    quiet origins first (``counts_from_latest_change``)."""
    if not past_known_change_cap(multiplier_s2, bound_s):
        return reported_change_delay_s(rate_per_s, min(multiplier_s2, soon_s * soon_s / 2), floor_s)
    delay = reported_change_delay_s(rate_per_s, bound_s * bound_s / 2, floor_s)
    return -max(delay, LATEST_CHANGE_MIN_DELAY_S)


def past_known_change_cap(multiplier_s2: float | None, bound_s: float) -> bool:
    """Whether μ is past the cap of known changes, ``bound_s²/2`` (infinite μ
    included): the workers cannot visit even the fastest changers within
    ``bound_s``, so they cannot follow every reported change (quiet origins
    first, the module's docstring)."""
    if multiplier_s2 is None or bound_s <= 0:
        return False
    return multiplier_s2 > bound_s * bound_s / 2


#: The least delay counted from the latest reported change: a delay of 0 has no sign.
LATEST_CHANGE_MIN_DELAY_S = 1.0


def counts_from_latest_change(delay_s: float) -> bool:
    """Whether a stored delay after a reported change (``known_change_delay_s``)
    counts from the latest reported change, quiet origins first (negative: the
    workers could not follow every reported change when it was planned), or
    from the first missed one."""
    return delay_s < 0
