"""The hidden world: each origin's change process, drawn once from a seeded RNG.

Times are seconds since the Unix epoch (floats), rates are per day. Only what
matters to the archive is drawn: the origin's creation (its first content),
its last change before the run starts (what a lister reports then), and every
change during the run. The history before the start is lumped into the
creation's commits, since the archive holds nothing at the start.

Kinds of origin:

- ``regular``: Poisson changes at the origin's hidden rate;
- ``flaky``: the same, and each visit fails with a fixed probability;
- ``bursty``: bursts arrive as a Poisson process, each of several changes a
  few minutes apart, at the same mean rate of changes;
- ``dormant``: silent for years, wakes at a random time of the run (or, with
  ``dormant_wake_days``, many together), then changes at a fast rate (between
  weekly and the distribution's maximum), in bursts with ``dormant_bursty``;
- ``dead``: still listed, but gone: every visit finds ``not_found``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np

from app.simulator.config import Lister, Loader, VisitTypeWorld, WorldConfig

DAY_S = 86400.0
YEAR_S = 365 * DAY_S
KINDS = ("regular", "flaky", "bursty", "dormant", "dead")
BURST_SIZE_MEAN = 8.0
BURST_GAP_S = 15 * 60.0
DORMANT_MIN_RATE_PER_DAY = 1 / 7


@dataclass(frozen=True)
class Origin:
    """One origin as the forge knows it (hidden from the scheduler)."""

    index: int
    url: str
    kind: str
    rate_per_day: float
    """Mean change rate while awake (0 for dead origins)."""
    lister: int
    appear_s: float
    vanish_s: float
    """When it leaves its forge (inf: never during the run)."""
    wake_s: float
    """When a dormant origin starts changing (-inf for the others)."""
    changes: np.ndarray[tuple[int], np.dtype[np.float64]]
    """Sorted change times; the first is the creation."""
    commits: np.ndarray[tuple[int], np.dtype[np.int64]]
    """Commits in the origin after each change (cumulative)."""
    size: float = 1.0
    """How much slower than a typical origin each of its visits is."""

    def changes_until(self, t: float) -> int:
        """How many changes happened at or before ``t``."""
        return int(np.searchsorted(self.changes, t, side="right"))

    def effective_rate(self, begin_s: float, end_s: float) -> float:
        """The long-run change rate over [begin, end] (per day): what an oracle
        would allocate visits by."""
        if self.kind == "dead" or end_s <= begin_s:
            return 0.0
        awake = end_s - max(begin_s, self.wake_s, self.appear_s)
        return self.rate_per_day * max(0.0, awake) / (end_s - begin_s)


@dataclass(frozen=True)
class VisitTypeWorldState:
    """The origins of one visit type and the listers that report them."""

    config: VisitTypeWorld
    listers: list[Lister]
    origins: list[Origin]


def build_world(config: WorldConfig, days: float) -> list[VisitTypeWorldState]:
    """Draw every visit type's origins for a run of ``days`` from ``config.seed``."""
    start = config.start.timestamp()
    end = start + days * DAY_S
    seeds = np.random.SeedSequence(config.seed).spawn(len(config.visit_types))
    # sizes from a stream of their own: turning them on changes no other draw
    size_seeds = np.random.SeedSequence([config.seed, 3]).spawn(len(config.visit_types))
    worlds = []
    for vt, seq, size_seq in zip(config.visit_types, seeds, size_seeds, strict=True):
        world = _build_visit_type(vt, np.random.default_rng(seq), start, end, config)
        if config.loader.size_tail_alpha is not None:
            sizes = origin_sizes(
                np.random.default_rng(size_seq),
                len(world.origins),
                config.loader.size_tail_alpha,
                config.loader.size_max,
            )
            origins = [replace(o, size=float(z)) for o, z in zip(world.origins, sizes, strict=True)]
            world = replace(world, origins=origins)
        worlds.append(world)
    return worlds


def origin_sizes(
    rng: np.random.Generator, count: int, alpha: float, size_max: float
) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    """Heavy-tailed size factors: Pareto of shape ``alpha`` with mean 1, capped."""
    minimum = (alpha - 1) / alpha
    sizes: np.ndarray[tuple[int], np.dtype[np.float64]] = np.minimum(
        size_max, minimum * (1 + rng.pareto(alpha, count))
    )
    return sizes


def _build_visit_type(
    vt: VisitTypeWorld, rng: np.random.Generator, start: float, end: float, config: WorldConfig
) -> VisitTypeWorldState:
    shares = np.array([lister.share for lister in vt.listers])
    shares = shares / shares.sum()
    n_new = int(rng.poisson(vt.new_origins_per_day * (end - start) / DAY_S))
    appear = np.concatenate(
        [
            start - rng.uniform(30 * DAY_S, 5 * YEAR_S, vt.origins),
            np.sort(rng.uniform(start, end, n_new)),
        ]
    )
    origins = []
    for index, appear_s in enumerate(appear):
        lister = int(rng.choice(len(vt.listers), p=shares))
        origins.append(_origin(vt, rng, index, float(appear_s), start, end, lister, config.loader))
    return VisitTypeWorldState(vt, list(vt.listers), origins)


def _kind(vt: VisitTypeWorld, rng: np.random.Generator) -> str:
    s = vt.shares
    weights = [1 - s.flaky - s.bursty - s.dormant - s.dead, s.flaky, s.bursty, s.dormant, s.dead]
    return KINDS[int(rng.choice(len(KINDS), p=np.array(weights) / sum(weights)))]


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def _origin(
    vt: VisitTypeWorld,
    rng: np.random.Generator,
    index: int,
    appear_s: float,
    start: float,
    end: float,
    lister: int,
    loader: Loader,
) -> Origin:
    kind = _kind(vt, rng)
    rate = _log_uniform(rng, vt.rates.min_per_day, vt.rates.max_per_day)
    wake = -math.inf
    times: list[float] = [appear_s]
    begin = max(start, appear_s)
    if kind == "dormant":
        rate = _log_uniform(
            rng, max(DORMANT_MIN_RATE_PER_DAY, vt.rates.min_per_day), vt.rates.max_per_day
        )
        if vt.dormant_wake_days:
            day = vt.dormant_wake_days[int(rng.integers(len(vt.dormant_wake_days)))]
            wake = max(begin, start + (day + float(rng.uniform())) * DAY_S)
        else:
            wake = max(begin, float(rng.uniform(start, end)))
        times += (_bursts if vt.dormant_bursty else _poisson)(rng, rate, wake, end)
    elif kind == "bursty":
        last = begin - rng.exponential(DAY_S * BURST_SIZE_MEAN / rate)
        if appear_s < last < start:
            times.append(float(last))
        times += _bursts(rng, rate, begin, end)
    elif kind != "dead":
        last = begin - rng.exponential(DAY_S / rate)
        if appear_s < last < start:
            times.append(float(last))
        times += _poisson(rng, rate, begin, end)
    else:
        rate = 0.0
    leave = (
        rng.exponential(1 / vt.disappearing_per_day) * DAY_S
        if vt.disappearing_per_day
        else math.inf
    )
    vanish = begin + leave if begin + leave < end else math.inf
    changes = np.array(sorted(times), dtype=np.float64)
    commits = np.cumsum(
        np.concatenate(
            [
                [1 + rng.poisson(loader.initial_commits - 1)],
                1 + rng.poisson(loader.commits_per_change - 1, len(changes) - 1),
            ]
        )
    ).astype(np.int64)
    name = vt.listers[lister].name
    url = f"https://{name}.example/{vt.name}/o{index:06d}"
    return Origin(index, url, kind, rate, lister, appear_s, vanish, wake, changes, commits)


def _poisson(
    rng: np.random.Generator, rate_per_day: float, begin: float, end: float
) -> list[float]:
    if rate_per_day <= 0 or end <= begin:
        return []
    count = rng.poisson(rate_per_day * (end - begin) / DAY_S)
    return sorted(float(t) for t in rng.uniform(begin, end, count))


def _bursts(rng: np.random.Generator, rate_per_day: float, begin: float, end: float) -> list[float]:
    times: list[float] = []
    for burst in _poisson(rng, rate_per_day / BURST_SIZE_MEAN, begin, end):
        size = 1 + int(rng.poisson(BURST_SIZE_MEAN - 1))
        offsets = np.concatenate([[0.0], np.cumsum(rng.exponential(BURST_GAP_S, size - 1))])
        times += [burst + float(o) for o in offsets if burst + o < end]
    return sorted(times)


def at(seconds: float) -> datetime:
    """A simulated instant as the aware datetime the production code takes."""
    return datetime.fromtimestamp(seconds, tz=UTC)
