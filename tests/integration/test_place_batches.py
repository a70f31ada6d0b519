"""place.lua applies a batch of placements in bulk: the result must be what
placing them one call at a time, in order, gives (issue 13)."""

import random
from typing import Any

import pytest

from app.domain.placement import POOLS, Placement
from app.services.context import Context
from queues.keys import VERSION_BUCKET
from queues.mirror import Mirror

pytestmark = pytest.mark.every_mirror

WHERE = ["absent", "pool", "pool", "inflight", "cooling"]


def random_placement(rng: random.Random, ids: int) -> Placement:
    pool = rng.choice(POOLS)
    return Placement(
        id=rng.randrange(1, ids + 1),
        where=rng.choice(WHERE),  # type: ignore[arg-type]
        score=float(rng.randrange(-100, 10_000)) / 4,
        pool=pool,
        pool_score=float(rng.randrange(0, 10_000)) / 8,
        version=rng.choice([0, 1, 2, 3, 4, 5]),
    )


def state(mirror: Mirror) -> list[Any]:
    """Everything place.lua writes for git, in the live keys and in those of a rebuild
    (whose version buckets are of generation "1", the end of its marker)."""
    keys = mirror.keys("git")
    return written(mirror, keys, "0") + written(mirror, keys.staging(), "1")


def written(mirror: Mirror, keys: Any, generation: str) -> list[Any]:
    client = mirror.client
    zsets = [keys.pool(p) for p in POOLS] + [keys.inflight, keys.cooling]
    return [client.zrange(z, 0, -1, withscores=True) for z in zsets] + [
        sorted(client.hgetall(keys.parked).items()),
        sorted(versions(mirror, keys, generation).items()),
    ]


def versions(mirror: Mirror, keys: Any, generation: str) -> dict[int, int]:
    """Every origin's version in one generation of the version buckets."""
    found: dict[int, int] = {}
    for key in mirror.client.scan_iter(match=f"{keys.versions}:{generation}:*"):
        bucket = int(key.rsplit(b":", 1)[1])
        for field, version in mirror.client.hgetall(key).items():
            found[bucket * VERSION_BUCKET + int(field)] = int(version)
    return found


@pytest.mark.parametrize("rebuilding", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_a_batch_places_origins_as_one_call_per_placement_would(
    ctx: Context, seed: int, rebuilding: bool
) -> None:
    rng = random.Random(seed)
    batched = ctx.mirror
    one_by_one = Mirror(batched.client, batched.namespace + "-one-by-one")
    if rebuilding:  # every placement also goes to the staging keys
        for mirror in (batched, one_by_one):
            mirror.client.set(mirror.keys("git").staging().meta, "1")
    start = [random_placement(rng, 60) for _ in range(80)]
    for mirror in (batched, one_by_one):
        for p in start:
            mirror.place("git", [p])
    assert state(batched) == state(one_by_one)
    for _ in range(4):
        # duplicates, older and newer versions, every place, in one call
        batch = [random_placement(rng, 60) for _ in range(120)]
        moved = batched.place("git", batch)
        moved_one_by_one = sum(one_by_one.place("git", [p]) for p in batch)
        assert moved == moved_one_by_one
        assert state(batched) == state(one_by_one)
    staged = written(batched, batched.keys("git").staging(), "1")
    assert any(staged) == rebuilding
