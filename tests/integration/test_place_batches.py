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
    pools = []
    for p in POOLS:
        members: list[Any] = []
        for bucket in client.zrange(keys.pool_index(generation, p), 0, -1):
            members += client.zrange(
                keys.pool_bucket(generation, p, bucket), 0, -1, withscores=True
            )
        pools.append(members)
    resting = [client.zrange(z, 0, -1, withscores=True) for z in (keys.inflight, keys.cooling)]
    return [*pools, *resting, sorted(entries(mirror, keys, generation).items())]


def entries(mirror: Mirror, keys: Any, generation: str) -> dict[int, bytes]:
    """Every origin's entry (its version and the pool it is in or returns to) in
    one generation of the version buckets."""
    found: dict[int, bytes] = {}
    prefix = f"{keys.versions}:{generation}:".encode()
    for key in mirror.client.scan_iter(match=prefix + b"*"):
        bucket = key[len(prefix) :]
        if not bucket.isdigit():
            continue  # a pool's index, bucket or sizes
        for field, entry in mirror.client.hgetall(key).items():
            found[int(bucket) * VERSION_BUCKET + int(field)] = entry
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
