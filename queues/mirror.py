"""The Redis side of the scheduling mirror: placing, popping, rebuilding, reading."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from itertools import islice
from typing import Any

import redis

from app.domain.placement import Placement, Where
from queues.keys import VisitTypeKeys

PLACE_CHUNK = 2000
MAX_MOVES_PER_POP = 10000


def _script(name: str) -> str:
    return (resources.files("queues") / "lua" / f"{name}.lua").read_text()


@dataclass(frozen=True, slots=True)
class PopResult:
    """What one pop did: origins now in flight, and how many came back to the pool."""

    popped: list[tuple[int, float]]
    cooled: int
    lost: int


@dataclass(frozen=True, slots=True)
class Location:
    """Where the mirror has one origin, and its rank there (0 = next)."""

    where: Where
    score: float | None
    rank: int | None
    target: float | None


def _chunks(items: Iterable[Placement], size: int) -> Iterator[list[Placement]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class Mirror:
    """The mirror of every visit type, in one Redis database."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._pop = client.register_script(_script("pop"))
        self._place = client.register_script(_script("place"))

    def keys(self, visit_type: str) -> VisitTypeKeys:
        """Key names of one visit type."""
        return VisitTypeKeys(self.namespace, visit_type)

    def place(
        self, visit_type: str, placements: Iterable[Placement], *, keep_inflight: bool = False
    ) -> int:
        """Move origins to the places given; return how many moved."""
        keys = self.keys(visit_type)
        return self._place_into(keys, placements, keep_inflight=keep_inflight)

    def _place_into(
        self, keys: VisitTypeKeys, placements: Iterable[Placement], *, keep_inflight: bool
    ) -> int:
        moved = 0
        mode = "keep_inflight" if keep_inflight else "force"
        for chunk in _chunks(placements, PLACE_CHUNK):
            args: list[Any] = [mode]
            for p in chunk:
                args += [p.id, p.where, repr(p.score), repr(p.target)]
            moved += int(self._place(keys=keys.data_keys(), args=args))
        return moved

    def pop(
        self, visit_type: str, count: int, now_s: float, scheduled_cooldown_s: float
    ) -> PopResult:
        """Atomically move up to ``count`` origins with the lowest targets to in flight."""
        keys = self.keys(visit_type)
        cooled, lost, flat = self._pop(
            keys=keys.data_keys(),
            args=[repr(now_s), count, repr(scheduled_cooldown_s), MAX_MOVES_PER_POP],
        )
        popped = [(int(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]
        return PopResult(popped, int(cooled), int(lost))

    def is_built(self, visit_type: str) -> bool:
        """Whether the mirror of ``visit_type`` exists (it is lost when Redis restarts empty)."""
        return bool(self.client.exists(self.keys(visit_type).meta))

    def rebuild(self, visit_type: str, placements: Iterable[Placement]) -> int:
        """Replace the mirror of ``visit_type`` by ``placements``, atomically at the end."""
        live = self.keys(visit_type)
        staging = live.staging()
        self.client.delete(*staging.data_keys())
        count = 0
        for chunk in _chunks(placements, 20000):
            pipe = self.client.pipeline(transaction=False)
            _stage(pipe, staging, chunk)
            pipe.execute()
            count += len(chunk)
        pipe = self.client.pipeline(transaction=True)
        for old in live.data_keys():
            pipe.delete(old)
        for old, new in zip(live.data_keys(), staging.data_keys(), strict=True):
            if self.client.exists(new):
                pipe.rename(new, old)
        pipe.hset(live.meta, mapping={"rebuilt_at": repr(time.time()), "origins": count})
        pipe.execute()
        return count

    def contents(self, visit_type: str) -> dict[int, tuple[Where, float]]:
        """Every origin of the mirror with its place and score (for checks and tests)."""
        keys = self.keys(visit_type)
        found: dict[int, tuple[Where, float]] = {}
        for where, key in _places(keys):
            for member, score in self.client.zscan_iter(key, count=5000):
                origin = int(member)
                if origin in found:
                    raise RuntimeError(f"origin {origin} is in two places of {visit_type}")
                found[origin] = (where, float(score))
        return found

    def locate(self, visit_type: str, origin_id: int) -> Location:
        """Where one origin is, with its score and rank."""
        keys = self.keys(visit_type)
        target = self.client.hget(keys.parked, origin_id)
        for where, key in (
            ("pool", keys.pool()),
            ("inflight", keys.inflight),
            ("cooling", keys.cooling),
        ):
            score = self.client.zscore(key, origin_id)
            if score is not None:
                rank = self.client.zrank(key, origin_id)
                parked = float(target) if target is not None else float(score)
                return Location(where, float(score), rank, parked)  # type: ignore[arg-type]
        return Location("absent", None, None, None)

    def sizes(self, visit_type: str) -> dict[str, int]:
        """How many origins each place holds."""
        keys = self.keys(visit_type)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(keys.pool())
        pipe.zcard(keys.inflight)
        pipe.zcard(keys.cooling)
        pool, inflight, cooling = pipe.execute()
        return {"pool": int(pool), "inflight": int(inflight), "cooling": int(cooling)}


def _stage(pipe: Any, keys: VisitTypeKeys, chunk: list[Placement]) -> None:
    by_where: dict[str, dict[str, float]] = {"pool": {}, "inflight": {}, "cooling": {}}
    parked: dict[str, str] = {}
    for p in chunk:
        if p.where == "absent":
            continue
        by_where[p.where][str(p.id)] = p.score
        if p.where != "pool":
            parked[str(p.id)] = repr(p.target)
    for where, key in (
        ("pool", keys.pool()),
        ("inflight", keys.inflight),
        ("cooling", keys.cooling),
    ):
        if by_where[where]:
            pipe.zadd(key, by_where[where])
    if parked:
        pipe.hset(keys.parked, mapping=parked)


def _places(keys: VisitTypeKeys) -> list[tuple[Where, str]]:
    return [("pool", keys.pool()), ("inflight", keys.inflight), ("cooling", keys.cooling)]
