"""Reading the mirror, for checks, introspection and metrics (mixed into
``queues.mirror.Mirror``): every shard of a visit type, merged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import redis

from app.domain.placement import POOLS, PoolName, Where
from queues.keys import VisitTypeKeys, shard_of


def parse_parked(value: str | None) -> tuple[str, float] | None:
    """The (pool name, score) a parked value says an origin returns to."""
    if value is None:
        return None
    index, _, score = value.partition("|")
    return POOLS[int(index) - 1], float(score)


@dataclass(frozen=True, slots=True)
class Location:
    """Where the mirror has one origin: place, pool, score and rank there (0 = next)."""

    where: Where
    pool: str | None
    score: float | None
    rank: int | None


@dataclass(frozen=True, slots=True)
class Flight:
    """What the mirror tells of an origin's last send to a worker."""

    sent_at: float | None
    """When it was sent (unix s), while it is in flight."""
    cooling: bool
    """Whether it is cooling down: a visit of it ended since it was sent."""


def places_of(keys: VisitTypeKeys) -> list[tuple[str, str]]:
    """Each place that holds origins (pools by name, inflight, cooling) and its key."""
    return [
        *((name, keys.pool(name)) for name in POOLS),
        ("inflight", keys.inflight),
        ("cooling", keys.cooling),
    ]


@dataclass(frozen=True, slots=True)
class Corruption:
    """A mirror key no revisit write makes (a hand-made mistake): a key of the
    wrong type, or a ``member`` that is no stats id."""

    key: str
    what: str
    member: bytes | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.what} (`revisit mirror repair` or `mirror rebuild` fixes it)"


def key_types(keys: VisitTypeKeys) -> list[tuple[str, str]]:
    """Each key of one shard and the Redis type it must have."""
    return [
        *((key, "zset") for _, key in places_of(keys)),
        (keys.parked, "hash"),
        (keys.meta, "hash"),
        (keys.lateness, "list"),
    ]


#: Members or fields holding a character that is no digit (Redis glob).
_NOT_AN_ID = "*[^0-9]*"


class MirrorKeys:
    """The mirror's client and the key names of each visit type's shards."""

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        namespace: str,
        shards: Mapping[str, int] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self._shards = dict(shards or {})

    def keys(self, visit_type: str, shard: int = 0) -> VisitTypeKeys:
        """Key names of one visit type (of one of its shards)."""
        return VisitTypeKeys(self.namespace, visit_type, shard=shard)

    def shards(self, visit_type: str) -> int:
        """How many shards the visit type's mirror is split into (1: not split)."""
        return max(1, int(self._shards.get(visit_type, 1)))

    def shard_keys(self, visit_type: str) -> list[VisitTypeKeys]:
        """Key names of every shard of one visit type."""
        return [self.keys(visit_type, k) for k in range(self.shards(visit_type))]


class MirrorReads(MirrorKeys):
    """What reads the mirror's places without moving anything."""

    def corruptions(self, visit_type: str, members: bool = True) -> list[Corruption]:
        """The keys of the mirror of ``visit_type`` of the wrong type and, with
        ``members``, the members of its places and fields of its id hashes that
        are no stats id (a scan of every key, as long as ``mirror check``)."""
        found: list[Corruption] = []
        for keys in self.shard_keys(visit_type):
            expected = key_types(keys)
            pipe = self.client.pipeline(transaction=False)
            for key, _ in expected:
                pipe.type(key)
            for (key, want), got in zip(expected, pipe.execute(), strict=True):
                kind = got.decode() if isinstance(got, bytes) else str(got)
                if kind not in ("none", want):
                    found.append(Corruption(key, f"a {kind}, expected a {want}"))
                elif members and kind == "zset":
                    for member, _ in self.client.zscan_iter(key, match=_NOT_AN_ID, count=5000):
                        found.append(Corruption(key, f"member {member!r} is no id", member))
                elif members and kind == "hash" and key != keys.meta:
                    for field in self.client.hscan_iter(key, match=_NOT_AN_ID, count=5000):
                        name = field[0] if isinstance(field, tuple) else field
                        found.append(Corruption(key, f"field {name!r} is no id", name))
        return found

    def contents(self, visit_type: str) -> dict[int, tuple[str, float]]:
        """Every origin of the mirror with its place (a pool name, 'inflight' or
        'cooling') and score, from ``snapshot``; for checks and tests."""
        found, _ = self.snapshot(visit_type)
        for origin, places in found.items():
            if len(places) > 1:
                raise RuntimeError(f"origin {origin} is in two places of {visit_type}")
        return {origin: places[0] for origin, places in found.items()}

    def snapshot(
        self, visit_type: str
    ) -> tuple[dict[int, list[tuple[str, float]]], dict[int, tuple[str, float] | None]]:
        """Every place of every origin, and the parked hash, read in one MULTI/EXEC per
        shard so no move by another process falls between two keys. An origin may
        show up in several places (a fault): each is listed, for ``mirror check``."""
        found: dict[int, list[tuple[str, float]]] = {}
        parked: dict[int, tuple[str, float] | None] = {}
        for keys in self.shard_keys(visit_type):
            places = places_of(keys)
            pipe = self.client.pipeline(transaction=True)
            for _, key in places:
                pipe.zrange(key, 0, -1, withscores=True)
            pipe.hgetall(keys.parked)
            *members, raw_parked = pipe.execute()
            for (place, _), pairs in zip(places, members, strict=True):
                for member, score in pairs:
                    found.setdefault(int(member), []).append((place, float(score)))
            parked.update({int(k): parse_parked(v.decode()) for k, v in raw_parked.items()})
        return found, parked

    def locate(self, visit_type: str, origin_id: int) -> Location:
        """Where one origin is, with its score and rank (across every shard: the
        origins of its place with a lower score)."""
        shards = self.shards(visit_type)
        keys = self.keys(visit_type, shard_of(origin_id, shards))
        for index, (place, key) in enumerate(places_of(keys)):
            score = self.client.zscore(key, origin_id)
            if score is not None:
                rank = cast(int | None, self.client.zrank(key, origin_id))
                for other in self.shard_keys(visit_type):
                    if rank is not None and other.shard != keys.shard:
                        below = places_of(other)[index][1]
                        rank += int(self.client.zcount(below, "-inf", f"({score!r}"))
                where: Where = place if place in ("inflight", "cooling") else "pool"  # type: ignore[assignment]
                pool = place if where == "pool" else None
                return Location(where, pool, float(score), rank)
        return Location("absent", None, None, None)

    def flight(self, visit_type: str, origin_id: int) -> Flight:
        """Where the origin stands since it was last sent to a worker, read in
        one round trip (neither in flight nor cooling when the mirror does not
        have it)."""
        keys = self.keys(visit_type, shard_of(origin_id, self.shards(visit_type)))
        pipe = self.client.pipeline(transaction=False)
        pipe.zscore(keys.inflight, origin_id)
        pipe.zscore(keys.cooling, origin_id)
        sent_at, cooling = pipe.execute()
        return Flight(None if sent_at is None else float(sent_at), cooling is not None)

    def sizes(self, visit_type: str) -> dict[str, int]:
        """How many origins each place holds (pools by name, inflight, cooling)."""
        pipe = self.client.pipeline(transaction=False)
        names: list[str] = []
        for keys in self.shard_keys(visit_type):
            for place, key in places_of(keys):
                pipe.zcard(key)
                names.append(place)
        totals: dict[str, int] = {}
        for place, n in zip(names, pipe.execute(), strict=True):
            totals[place] = totals.get(place, 0) + int(n)
        return totals

    def head_score(self, visit_type: str, pool: PoolName) -> float | None:
        """The score of the first origin of a pool, across every shard (None: empty)."""
        heads = [
            self.client.zrange(keys.pool(pool), 0, 0, withscores=True)
            for keys in self.shard_keys(visit_type)
        ]
        scores = [float(head[0][1]) for head in heads if head]
        return min(scores) if scores else None
