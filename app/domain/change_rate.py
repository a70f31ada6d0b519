"""How often an origin changes, learned from its visits (pure math).

A visit tells whether the origin changed since the previous successful visit,
not how many times: the observations are binary, over irregular intervals.
The maximum-likelihood rate λ of a Poisson change process from such
observations (Cho & Garcia-Molina, "Estimating frequency of change", ACM TOIT
3(3), 2003, section 5, irregular access) solves

    Σ_changed t_i / (e^{λ t_i} - 1)  =  Σ_unchanged t_j

(the left side falls from +∞ to 0 as λ grows, so the root is unique). Three
choices make it fit an archive:

- **Sufficient statistics that fold.** An origin keeps only its newest visits
  and a fold of the older ones (``app.domain.visit_history``), so the
  observations are summed into three numbers: the count and total length of
  the intervals that saw a change, and the total length of those that saw
  none. The changed intervals enter the equation as that many intervals of
  their mean length, which is exact for evenly spaced visits and close for
  the moderately irregular ones a scheduler makes.
- **Forgetting.** Each new observation discounts the older ones by
  ``DECAY`` (an effective memory of about ten visits), so an origin that wakes
  up or falls asleep is re-learned within a few visits.
- **A prior.** Pseudo-observations (a tenth of a changed interval and a
  tenth of an unchanged one, both as long as the mean interval observed,
  or ``prior_interval_s`` before any) keep the estimate finite before the
  first change or the first unchanged visit, like the +0.5 correction of Cho
  & Garcia-Molina's estimator for regular visits, at the scale of the visits
  actually made: a new origin starts at ln 2 / prior_interval_s, and the
  prior never outweighs what the visits say. On synthetic Poisson origins
  the median estimate is within 10 % of the true rate when visits are 0.1-6
  change intervals apart; visits much rarer than that under-estimate (every
  visit sees a change: little to learn; half the rate at 6-12 intervals).
  The prior's weight sets how far: at a quarter, the fast changers visited
  3-6 change intervals apart were estimated 20 % low, and planned too rarely.

Exploration (an origin with little history should be tried more often than
its point estimate says, or a wrong low estimate is never corrected) plans
with an upper confidence bound: the estimate times 1 + z/√k, the
``EXPLORE_QUANTILE`` quantile of a normal approximation of the Gamma(k)
uncertainty of a rate learned from k changes (k: the discounted changes seen
plus the prior's), capped at ``MAX_OPTIMISM``. A new origin is planned at 3 times
its prior rate (the cap); one with 10 changes seen at 1.2 times its estimate.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import msgspec

#: Discount of the older observations at each new one (memory of ~1/(1-DECAY) visits).
DECAY = 0.9
#: Weight of the prior's pseudo-observations, in intervals.
PRIOR_WEIGHT = 0.1
#: The quantile of the rate's uncertainty used to schedule (optimism for exploration).
EXPLORE_QUANTILE = 0.75
_Z = NormalDist().inv_cdf(EXPLORE_QUANTILE)
#: The most a thin history may shorten the planned interval's rate by.
MAX_OPTIMISM = 3.0
_MAX_STEPS = 100
_TOLERANCE = 1e-10  # in log λ
_LO_PER_S = 1e-14  # once in three million years
_HI_PER_S = 1e2


class ChangeObservations(msgspec.Struct, frozen=True, gc=False):
    """Discounted sufficient statistics of the binary change observations."""

    changed: float = 0.0
    """How many intervals between successful visits saw a change (discounted)."""
    changed_s: float = 0.0
    """Their total length in seconds (discounted)."""
    unchanged: float = 0.0
    """How many intervals saw no change (discounted)."""
    unchanged_s: float = 0.0
    """Total length in seconds of the intervals that saw no change (discounted)."""


def observe(obs: ChangeObservations, interval_s: float, changed: bool) -> ChangeObservations:
    """The statistics after one more interval between two successful visits."""
    if interval_s <= 0:
        return obs
    return ChangeObservations(
        obs.changed * DECAY + (1.0 if changed else 0.0),
        obs.changed_s * DECAY + (interval_s if changed else 0.0),
        obs.unchanged * DECAY + (0.0 if changed else 1.0),
        obs.unchanged_s * DECAY + (0.0 if changed else interval_s),
    )


def _terms(
    obs: ChangeObservations, prior_interval_s: float
) -> tuple[list[tuple[float, float]], float]:
    """The likelihood equation Σ c·L / (e^{λL} - 1) = U as its (c, L) terms and U,
    the prior's pseudo-observations included."""
    seen = obs.changed + obs.unchanged
    typical = (obs.changed_s + obs.unchanged_s) / seen if seen > 0 else prior_interval_s
    terms = [(PRIOR_WEIGHT, typical)]
    if obs.changed > 0 and obs.changed_s > 0:
        terms.append((obs.changed, obs.changed_s / obs.changed))
    return terms, obs.unchanged_s + PRIOR_WEIGHT * typical


def _excess(
    log_rate: float, terms: list[tuple[float, float]], unchanged_s: float
) -> tuple[float, float]:
    """Left minus right side of the likelihood equation at λ = e^{log_rate}, and its
    derivative in log_rate (negative: the excess falls as the rate grows)."""
    rate = math.exp(log_rate)
    value, slope = -unchanged_s, 0.0
    for count, length in terms:
        x = rate * length
        if x > 700:
            continue
        e = math.expm1(x)
        value += count * length / e
        slope -= count * length * x * (e + 1) / (e * e)
    return value, slope


def estimate_per_s(obs: ChangeObservations, prior_interval_s: float) -> float:
    """The estimated change rate (per second): the root of the likelihood equation
    with the prior's pseudo-observations, by Newton's method on log λ kept inside
    a bracket (a few steps, where a bisection takes dozens: this runs once per
    refolded origin in every journal batch)."""
    if prior_interval_s <= 0:
        raise ValueError(f"prior_interval_s: must be positive, got {prior_interval_s}")
    changed, changed_s, unchanged, unchanged_s = (
        obs.changed,
        obs.changed_s,
        obs.unchanged,
        obs.unchanged_s,
    )
    if not (changed or changed_s or unchanged or unchanged_s):
        # Nothing observed yet (an origin's first visits): the prior's rate.
        known = _PRIOR_RATES.get(prior_interval_s)
        if known is None:
            if len(_PRIOR_RATES) >= _PRIOR_RATES_KEPT:
                _PRIOR_RATES.clear()
            known = _PRIOR_RATES[prior_interval_s] = _solve(obs, prior_interval_s)
        return known
    return _solve(obs, prior_interval_s)


#: The estimate of no observation, per prior interval (a handful: one per visit type).
_PRIOR_RATES: dict[float, float] = {}
_PRIOR_RATES_KEPT = 64
_LOG_LO = math.log(_LO_PER_S)
_LOG_HI = math.log(_HI_PER_S)


def _solve(obs: ChangeObservations, prior_interval_s: float) -> float:
    """``estimate_per_s``: the equation of ``_terms`` and the Newton steps on
    ``_excess``, with its (at most two) terms unrolled, every float operation as
    they do it, in the same order, so the root is the same to the last bit (a
    unit test compares them)."""
    changed, changed_s = obs.changed, obs.changed_s
    seen = changed + obs.unchanged
    typical = (changed_s + obs.unchanged_s) / seen if seen > 0 else prior_interval_s
    prior_cl = PRIOR_WEIGHT * typical  # the prior's term: count x length
    unchanged_s = obs.unchanged_s + prior_cl
    two = changed > 0 and changed_s > 0
    changed_l = changed_s / changed if two else 0.0  # the changed intervals' term
    changed_cl = changed * changed_l
    count = PRIOR_WEIGHT + changed if two else PRIOR_WEIGHT
    length = (prior_cl + changed_cl if two else prior_cl) / count
    u = math.log(max(_LO_PER_S, min(_HI_PER_S, math.log1p(count * length / unchanged_s) / length)))
    lo, hi = _LOG_LO, _LOG_HI
    for _ in range(_MAX_STEPS):
        rate = math.exp(u)
        value, slope = -unchanged_s, 0.0
        x = rate * typical
        if not x > 700:
            e = math.expm1(x)
            value += prior_cl / e
            slope -= prior_cl * x * (e + 1) / (e * e)
        if two:
            x = rate * changed_l
            if not x > 700:
                e = math.expm1(x)
                value += changed_cl / e
                slope -= changed_cl * x * (e + 1) / (e * e)
        if value > 0:
            lo = u
        else:
            hi = u
        step = value / slope if slope < 0 else math.inf
        if abs(step) < _TOLERANCE:
            return math.exp(u - step)
        u = u - step
        if not lo < u < hi:
            u = (lo + hi) / 2  # Newton left the bracket: bisect instead
    return math.exp(u)


def optimism(obs: ChangeObservations) -> float:
    """Factor (≥ 1) by which the scheduling rate exceeds the estimate while the
    evidence is thin: 1 + z/√k, k = changes seen + the prior's."""
    k = obs.changed + PRIOR_WEIGHT
    return min(MAX_OPTIMISM, 1.0 + _Z / math.sqrt(k))
