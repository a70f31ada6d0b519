"""The Redis side of the scheduling mirror: placing, popping, rebuilding, reading."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import islice
from typing import Any

import redis

from app.domain.placement import POOLS, Placement, PoolName, Where
from queues.keys import VisitTypeKeys

PLACE_CHUNK = 2000
MAX_MOVES_PER_POP = 10000
#: Lua place index of each place (pools are 1..4 in POOLS order).
PLACE_INDEX: dict[str, int] = {"absent": 0, "inflight": 5, "cooling": 6}
POOL_INDEX: dict[str, int] = {name: i + 1 for i, name in enumerate(POOLS)}


#: Planned picks whose lateness is kept between two allocation refreshes.
LATENESS_KEPT = 5000


def _script(name: str) -> str:
    return (resources.files("queues") / "lua" / f"{name}.lua").read_text()


def parked_value(p: Placement) -> str:
    """The ``parked`` hash value of an origin in flight or cooling: where it returns."""
    return f"{POOL_INDEX[p.pool]}|{p.pool_score!r}"


def parse_parked(value: str | None) -> tuple[str, float] | None:
    """The (pool name, score) a parked value says an origin returns to."""
    if value is None:
        return None
    index, _, score = value.partition("|")
    return POOLS[int(index) - 1], float(score)


def returns_to(p: Placement) -> tuple[str, float]:
    """The (pool name, score) an origin returns to after resting."""
    return p.pool, p.pool_score


def place_index(p: Placement) -> int:
    """The Lua index of a placement's place."""
    return POOL_INDEX[p.pool] if p.where == "pool" else PLACE_INDEX[p.where]


@dataclass(frozen=True, slots=True)
class Popped:
    """One origin taken by a pop: its id, the pool it came from and its score there."""

    id: int
    pool: PoolName
    score: float


@dataclass(frozen=True, slots=True)
class PopResult:
    """What one pop did: origins now in flight, and how many came back to the pools."""

    popped: list[Popped]
    cooled: int
    lost: int


@dataclass(frozen=True, slots=True)
class Location:
    """Where the mirror has one origin: place, pool, score and rank there (0 = next)."""

    where: Where
    pool: str | None
    score: float | None
    rank: int | None


def _chunks(items: Iterable[Placement], size: int) -> Iterator[list[Placement]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


Weights = Sequence[float] | str


class Mirror:
    """The mirror of every visit type, in one Redis database."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._pop = client.register_script(_script("pop"))
        self._place = client.register_script(_script("place"))
        self._claim = client.register_script(_script("claim"))

    def keys(self, visit_type: str) -> VisitTypeKeys:
        """Key names of one visit type."""
        return VisitTypeKeys(self.namespace, visit_type)

    def place(
        self, visit_type: str, placements: Iterable[Placement], *, keep_inflight: bool = False
    ) -> int:
        """Move origins to the places given; return how many moved.

        ``keep_inflight`` leaves origins that Redis has in flight alone (for
        writers that do not know about a pop still being recorded).
        """
        keys = self.keys(visit_type).data_keys()
        mode = "keep_inflight" if keep_inflight else "force"
        moved = 0
        for chunk in _chunks(placements, PLACE_CHUNK):
            args: list[Any] = [mode]
            for p in chunk:
                args += [p.id, place_index(p), repr(p.score), parked_value(p)]
            moved += int(self._place(keys=keys, args=args))
        return moved

    def add_new(self, visit_type: str, placements: Iterable[Placement]) -> int:
        """Add origins that cannot be in the mirror yet (just created in Postgres),
        with plain pipelined writes: much faster than ``place`` for bulk listings."""
        return self._write(self.keys(visit_type), placements)

    def pop(
        self,
        visit_type: str,
        count: int,
        now_s: float,
        scheduled_cooldown_s: float,
        weights: Weights = "auto",
        *,
        peek: bool = False,
        head_start_s: float = 0.0,
    ) -> PopResult:
        """Atomically move up to ``count`` origins, split across the pools by
        ``weights`` (one per pool in POOLS order, or 'auto', or 'due' with the
        ``head_start_s`` of known work), to in flight.
        With ``peek``, only say which origins that would be; nothing moves."""
        keys = self.keys(visit_type)
        weight_args = (
            [weights, repr(float(head_start_s)), 0, 0]
            if isinstance(weights, str)
            else [repr(float(w)) for w in weights]
        )
        if len(weight_args) != len(POOLS):
            raise ValueError(f"weights: expected {len(POOLS)} values, got {len(weight_args)}")
        cooled, lost, flat = self._pop(
            keys=[*keys.data_keys(), keys.meta],
            args=[
                repr(now_s),
                count,
                repr(scheduled_cooldown_s),
                MAX_MOVES_PER_POP,
                *weight_args,
                "peek" if peek else "pop",
            ],
        )
        return PopResult(_popped(flat), int(cooled), int(lost))

    def claim(
        self, visit_type: str, ids: Sequence[int], now_s: float, most: int, *, peek: bool = False
    ) -> list[Popped]:
        """Move up to ``most`` of the given origins that wait in a pool to in flight,
        atomically, in the given order; origins resting or in flight are skipped.
        With ``peek``, only say which; nothing moves."""
        if not ids or most <= 0:
            return []
        keys = self.keys(visit_type)
        limit = -most if peek else most
        return _popped(self._claim(keys=keys.data_keys(), args=[repr(now_s), limit, *ids]))

    def record_pick_rates(self, visit_type: str, rates: dict[str, float]) -> None:
        """Store the recent pick rate (origins/s) of each pool, for ETAs."""
        mapping: dict[Any, Any] = {f"rate:{p}": r for p, r in rates.items()}
        if mapping:
            self.client.hset(self.keys(visit_type).meta, mapping=mapping)

    def count_picks(self, visit_type: str, picks: Mapping[str, int]) -> None:
        """Add a step's picks per pool to the counts the allocation measures capacity by
        (only while the mirror exists: meta's absence means it must be rebuilt)."""
        meta = self.keys(visit_type).meta
        if not picks or not self.client.exists(meta):
            return
        pipe = self.client.pipeline(transaction=False)
        for pool, count in picks.items():
            pipe.hincrby(meta, f"picks:{pool}", count)
        pipe.execute()

    def take_pick_counts(
        self, visit_type: str, now_s: float
    ) -> tuple[dict[str, int], float | None]:
        """The picks per pool counted since the last call, and when that was
        (None the first time); the counts restart at ``now_s``."""
        meta = self.keys(visit_type).meta
        if not self.client.exists(meta):
            return {}, None
        fields = [f"picks:{pool}" for pool in POOLS]
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(meta, [*fields, "picks_since"])
        pipe.hdel(meta, *fields)
        pipe.hset(meta, "picks_since", repr(now_s))
        pipe.hsetnx(meta, "picks_first", repr(now_s))
        values = pipe.execute()[0]
        counts: dict[str, int] = {pool: int(v or 0) for pool, v in zip(POOLS, values, strict=False)}
        since = values[-1]
        return counts, (float(since) if since is not None else None)

    def picks_first(self, visit_type: str) -> float | None:
        """When the allocation's pick counts first started (None: never)."""
        value = self.client.hget(self.keys(visit_type).meta, "picks_first")
        return float(value) if value is not None else None

    def picks_since(self, visit_type: str) -> float | None:
        """When the allocation's pick counts last restarted (None: never)."""
        value = self.client.hget(self.keys(visit_type).meta, "picks_since")
        return float(value) if value is not None else None

    def pick_rate(self, visit_type: str, pool: str) -> float:
        """The recent pick rate (origins/s) of a pool, 0 if unknown."""
        value = self.client.hget(self.keys(visit_type).meta, f"rate:{pool}")
        return float(value) if value is not None else 0.0

    def record_lateness(self, visit_type: str, lateness_s: Sequence[float]) -> None:
        """Keep how late planned picks were served (the latest ``LATENESS_KEPT``),
        which the allocation corrects μ by (only while the mirror exists)."""
        keys = self.keys(visit_type)
        if not lateness_s or not self.client.exists(keys.meta):
            return
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(keys.lateness, *[repr(float(v)) for v in lateness_s])
        pipe.ltrim(keys.lateness, -LATENESS_KEPT, -1)
        pipe.execute()

    def take_lateness(self, visit_type: str) -> list[float]:
        """The lateness of the planned picks kept since the last call; restarts."""
        key = self.keys(visit_type).lateness
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(key, 0, -1)
        pipe.delete(key)
        return [float(v) for v in pipe.execute()[0]]

    def head_score(self, visit_type: str, pool: PoolName) -> float | None:
        """The score of the first origin of a pool (None: empty)."""
        head = self.client.zrange(self.keys(visit_type).pool(pool), 0, 0, withscores=True)
        return float(head[0][1]) if head else None

    def replan_state(self, visit_type: str) -> tuple[int, float | None]:
        """Where the re-planning sweep of a visit type goes on (the stats id it
        stopped after, 0: not sweeping) and the multiplier of the last sweep."""
        after, multiplier = self.client.hmget(
            self.keys(visit_type).meta, ["replan_after", "replan_multiplier"]
        )
        return int(after or 0), (float(multiplier) if multiplier is not None else None)

    def set_replan_state(self, visit_type: str, after_id: int, multiplier_s2: float) -> None:
        """Record the sweep's progress (only while the mirror exists)."""
        meta = self.keys(visit_type).meta
        if self.client.exists(meta):
            self.client.hset(
                meta, mapping={"replan_after": after_id, "replan_multiplier": repr(multiplier_s2)}
            )

    def is_built(self, visit_type: str) -> bool:
        """Whether the mirror of ``visit_type`` exists (it is lost when Redis restarts empty)."""
        return bool(self.client.exists(self.keys(visit_type).meta))

    def rebuild(self, visit_type: str, placements: Iterable[Placement]) -> int:
        """Replace the mirror of ``visit_type`` by ``placements``, atomically at the end."""
        live = self.keys(visit_type)
        staging = live.staging()
        self.client.delete(*staging.data_keys())
        count = self._write(staging, placements)
        pipe = self.client.pipeline(transaction=True)
        for old in live.data_keys():
            pipe.delete(old)
        for old, new in zip(live.data_keys(), staging.data_keys(), strict=True):
            if self.client.exists(new):
                pipe.rename(new, old)
        pipe.hset(live.meta, mapping={"rebuilt_at": repr(time.time()), "origins": count})
        pipe.execute()
        return count

    def _write(self, keys: VisitTypeKeys, placements: Iterable[Placement]) -> int:
        count = 0
        for chunk in _chunks(placements, 20000):
            pipe = self.client.pipeline(transaction=False)
            _stage(pipe, keys, chunk)
            pipe.execute()
            count += len(chunk)
        return count

    def contents(self, visit_type: str) -> dict[int, tuple[str, float]]:
        """Every origin of the mirror with its place (a pool name, 'inflight' or
        'cooling') and score; for checks and tests."""
        keys = self.keys(visit_type)
        found: dict[int, tuple[str, float]] = {}
        for place, key in _places(keys):
            for member, score in self.client.zscan_iter(key, count=5000):
                origin = int(member)
                if origin in found:
                    raise RuntimeError(f"origin {origin} is in two places of {visit_type}")
                found[origin] = (place, float(score))
        return found

    def snapshot(
        self, visit_type: str
    ) -> tuple[dict[int, list[tuple[str, float]]], dict[int, tuple[str, float] | None]]:
        """Every place of every origin, and the parked hash, read in one MULTI/EXEC so
        no move by another process falls between two keys. An origin may show up in
        several places (a fault): each is listed, for ``mirror check`` to report."""
        keys = self.keys(visit_type)
        places = _places(keys)
        pipe = self.client.pipeline(transaction=True)
        for _, key in places:
            pipe.zrange(key, 0, -1, withscores=True)
        pipe.hgetall(keys.parked)
        *members, raw_parked = pipe.execute()
        found: dict[int, list[tuple[str, float]]] = {}
        for (place, _), pairs in zip(places, members, strict=True):
            for member, score in pairs:
                found.setdefault(int(member), []).append((place, float(score)))
        parked = {int(k): parse_parked(v.decode()) for k, v in raw_parked.items()}
        return found, parked

    def parked(self, visit_type: str) -> dict[int, tuple[str, float]]:
        """The parked hash: the (pool, score) each in-flight or cooling origin returns to."""
        raw = self.client.hgetall(self.keys(visit_type).parked)
        return {int(k): parse_parked(v.decode()) for k, v in raw.items()}  # type: ignore[misc,union-attr]

    def locate(self, visit_type: str, origin_id: int) -> Location:
        """Where one origin is, with its score and rank."""
        keys = self.keys(visit_type)
        for place, key in _places(keys):
            score = self.client.zscore(key, origin_id)
            if score is not None:
                rank = self.client.zrank(key, origin_id)
                where: Where = place if place in ("inflight", "cooling") else "pool"  # type: ignore[assignment]
                pool = place if where == "pool" else None
                return Location(where, pool, float(score), rank)  # type: ignore[arg-type]
        return Location("absent", None, None, None)

    def sizes(self, visit_type: str) -> dict[str, int]:
        """How many origins each place holds (pools by name, inflight, cooling)."""
        keys = self.keys(visit_type)
        pipe = self.client.pipeline(transaction=False)
        places = _places(keys)
        for _, key in places:
            pipe.zcard(key)
        return {place: int(n) for (place, _), n in zip(places, pipe.execute(), strict=True)}


def _popped(flat: list[Any]) -> list[Popped]:
    return [
        Popped(int(flat[i]), POOLS[int(flat[i + 1]) - 1], float(flat[i + 2]))
        for i in range(0, len(flat), 3)
    ]


def _places(keys: VisitTypeKeys) -> list[tuple[str, str]]:
    return [
        *((name, keys.pool(name)) for name in POOLS),
        ("inflight", keys.inflight),
        ("cooling", keys.cooling),
    ]


def _stage(pipe: Any, keys: VisitTypeKeys, chunk: list[Placement]) -> None:
    key_of: dict[str, str] = {name: keys.pool(name) for name in POOLS}
    key_of["inflight"], key_of["cooling"] = keys.inflight, keys.cooling
    by_key: dict[str, dict[str, float]] = {}
    parked: dict[str, str] = {}
    for p in chunk:
        if p.where == "absent":
            continue
        if p.where == "pool":
            key = key_of[p.pool]
        else:
            key = key_of[p.where]
            parked[str(p.id)] = parked_value(p)
        members = by_key.get(key)
        if members is None:
            members = by_key[key] = {}
        members[str(p.id)] = p.score
    for key, members in by_key.items():
        pipe.zadd(key, members)
    if parked:
        pipe.hset(keys.parked, mapping=parked)
