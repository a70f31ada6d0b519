"""The pop's picks and what it leaves behind, pinned: a faster pop.lua or a faster
reading of its reply must take the same origins, in the same order, and park
them the same way (issue 13)."""

import hashlib
import random
from typing import Any

import pytest

from app.domain.placement import POOLS, Placement
from app.services.context import Context
from queues.mirror import Mirror, Weights
from tests.integration.helpers import pool_members

pytestmark = pytest.mark.every_mirror

NOW = 1_788_000_000.123456
COOLDOWN_S = 86400.0

#: sha256 of ``trace()`` as the pop of main at d7e811a (one sorted set per pool,
#: before the bucketed pools of issue 35; it gave b6a8224's digest, before issue
#: 13's pop changes, with the parked hash read raw) gave it: picks, counts,
#: in-flight scores and where resting origins return (``Mirror.snapshot``).
PINNED_DIGEST = "aa7c0da6002b61a5ace3acc68d61d13cc9e3f6e3bd94522c244bccc756a420b8"


def fill(mirror: Mirror, rng: random.Random) -> None:
    """300 origins per pool with random scores (ties and negative lagging scores
    included), some cooling and some lost in flight, ready to come back."""
    placements = []
    for k, pool in enumerate(POOLS):
        for i in range(300):
            score = NOW + rng.uniform(-5e6, 5e6)
            if i % 7 == 0:
                score = float(round(score, -4))  # ties: the member breaks them
            if pool == "lagging" and i % 3 == 0:
                score = -rng.uniform(0, 1e6)
            placements.append(Placement(1 + 1000 * k + i, "pool", score, pool, score))  # type: ignore[arg-type]
    for i in range(40):
        pool = POOLS[i % 4]
        score = NOW + rng.uniform(-1e6, 1e6)
        where, at = ("cooling", NOW - 10.0 * i) if i % 2 else ("inflight", NOW - COOLDOWN_S - i)
        placements.append(Placement(5000 + i, where, at, pool, score))  # type: ignore[arg-type]
    mirror.place("git", placements)
    mirror.client.hset(mirror.keys("git").meta, "rebuilt_at", "1")


def trace(mirror: Mirror) -> list[Any]:
    """What a sequence of pops of every kind says and leaves in Redis."""
    out: list[Any] = []
    modes: list[tuple[int, Weights, bool]] = [
        (1, [49.0, 49.0, 2.0, 0.0], False),
        (100, [49.0, 49.0, 2.0, 0.0], True),
        (100, [49.0, 49.0, 2.0, 0.0], False),
        (37, [1.0, 0.0, 0.0, 0.0], False),
        (150, "auto", False),
        (120, "due", True),
        (120, "due", False),
        (250, [0.0, 5.0, 3.0, 0.0], False),
        (400, [49.0, 49.0, 2.0, 0.0], False),
    ]
    for step, (count, weights, peek) in enumerate(modes):
        result = mirror.pop(
            "git",
            count,
            NOW + step,
            COOLDOWN_S,
            weights,
            peek=peek,
        )
        out.append([result.cooled, result.lost, [(p.id, p.pool, p.score) for p in result.popped]])
    keys = mirror.keys("git")
    out.append(mirror.client.zrange(keys.inflight, 0, -1, withscores=True))
    out.append(sorted(mirror.snapshot("git")[1].items()))
    out.append(sorted(mirror.client.hgetall(keys.meta).items()))
    return out


def test_pops_take_park_and_report_what_they_did_before(ctx: Context) -> None:
    fill(ctx.mirror, random.Random(13))
    got = trace(ctx.mirror)
    first = got[0][2]
    assert len(first) == 1 and isinstance(first[0][0], int)
    assert sum(len(step[2]) for step in got[:-3]) > 1000
    assert hashlib.sha256(repr(got).encode()).hexdigest() == PINNED_DIGEST


def test_each_pool_gives_its_lowest_scores_in_ascending_order(ctx: Context) -> None:
    fill(ctx.mirror, random.Random(7))
    ctx.mirror.pop("git", 0, NOW, COOLDOWN_S, [49.0, 49.0, 2.0, 0.0])  # the rested return
    before = {pool: pool_members(ctx.mirror, "git", pool) for pool in POOLS}
    result = ctx.mirror.pop("git", 500, NOW, COOLDOWN_S, [49.0, 49.0, 2.0, 0.0])
    for pool in POOLS:
        picks = [(p.id, p.score) for p in result.popped if p.pool == pool]
        lowest = [(int(member), score) for member, score in before[pool][: len(picks)]]
        assert picks == lowest
