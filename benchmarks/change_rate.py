"""Cost of one change-rate estimate (app.domain.change_rate), which the journal
client runs for every origin a batch refolds: Newton's method on log rate
against the geometric bisection it replaced (80 steps), same equation, same
3,000 random visit histories, 3 runs with the load average.

    .venv/bin/python -m benchmarks.change_rate
"""

from __future__ import annotations

import math
import os
import random
import statistics
import timeit

from app.domain.change_rate import ChangeObservations, _excess, _terms, estimate_per_s, observe

PRIOR_S = 30 * 86400.0


def bisection(obs: ChangeObservations, prior_s: float) -> float:
    """The previous solver: 80 geometric bisections of the same equation."""
    terms, unchanged = _terms(obs, prior_s)
    lo, hi = math.log(1e-14), math.log(1e2)
    for _ in range(80):
        mid = (lo + hi) / 2
        if _excess(mid, terms, unchanged)[0] > 0:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def histories(count: int, seed: int = 3) -> list[ChangeObservations]:
    """Random histories: up to 30 intervals of 10 s to 3 years, half of them changed."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        obs = ChangeObservations()
        for _ in range(rng.randint(0, 30)):
            obs = observe(obs, 10 ** rng.uniform(1, 8), rng.random() < 0.5)
        out.append(obs)
    return out


def main() -> None:
    """Print each run and the medians."""
    data = histories(3000)
    worst = max(abs(estimate_per_s(o, PRIOR_S) / bisection(o, PRIOR_S) - 1) for o in data)
    runs = []
    for run in range(3):
        new = timeit.timeit(lambda: [estimate_per_s(o, PRIOR_S) for o in data], number=1)
        old = timeit.timeit(lambda: [bisection(o, PRIOR_S) for o in data], number=1)
        load = os.getloadavg()[0]
        runs.append((new / len(data) * 1e6, old / len(data) * 1e6))
        new_us, old_us = runs[-1]
        print(f"run {run}: newton {new_us:.2f} us, bisection {old_us:.2f} us, load {load:.2f}")
    new_us = statistics.median(r[0] for r in runs)
    old_us = statistics.median(r[1] for r in runs)
    print(
        f"median: newton {new_us:.2f} us, bisection {old_us:.2f} us, ratio {old_us / new_us:.1f}x"
    )
    print(f"largest relative difference of the two estimates: {worst:.1e}")


if __name__ == "__main__":
    main()
