"""Reading the mirror, for checks, introspection and metrics (mixed into
``queues.mirror.Mirror``): every shard of a visit type, merged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from app.domain.placement import POOLS, PoolName, Where
from queues import lua
from queues.keys import VisitTypeKeys, pool_number, shard_of


def parse_entry(value: bytes | str | None) -> tuple[str, float] | None:
    """The (pool name, score) an entry says an origin is in, or returns to
    (``<version> <pool index> <score>``; None: no pool)."""
    if value is None:
        return None
    parts = (value.decode() if isinstance(value, bytes) else value).split(" ")
    if len(parts) != 3:
        return None
    return POOLS[int(parts[1]) - 1], float(parts[2])


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


@dataclass(frozen=True, slots=True)
class Corruption:
    """A mirror key no revisit write makes (a hand-made mistake): a key of the
    wrong type, or a ``member`` that is no stats id."""

    key: str
    what: str
    member: bytes | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.what} (`revisit mirror repair` or `mirror rebuild` fixes it)"


def key_types(keys: VisitTypeKeys, generation: str) -> list[tuple[str, str]]:
    """Each key of one shard (its pools' indexes, of ``generation``) and the Redis
    type it must have."""
    return [
        (keys.inflight, "zset"),
        (keys.cooling, "zset"),
        *((keys.pool_index(generation, name), "zset") for name in POOLS),
        (keys.pool_counts(generation), "hash"),
        (keys.meta, "hash"),
        (keys.lateness, "list"),
    ]


#: Members or fields holding a character that is no digit (Redis glob).
_NOT_AN_ID = "*[^0-9]*"


class MirrorKeys:
    """The mirror's client, its read script and the key names of each visit type's shards."""

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        namespace: str,
        shards: Mapping[str, int] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self._shards = dict(shards or {})
        self._read = client.register_script(lua("bulk") + lua("read"))

    def keys(self, visit_type: str, shard: int = 0) -> VisitTypeKeys:
        """Key names of one visit type (of one of its shards)."""
        return VisitTypeKeys(self.namespace, visit_type, shard=shard)

    def shards(self, visit_type: str) -> int:
        """How many shards the visit type's mirror is split into (1: not split)."""
        return max(1, int(self._shards.get(visit_type, 1)))

    def shard_keys(self, visit_type: str) -> list[VisitTypeKeys]:
        """Key names of every shard of one visit type."""
        return [self.keys(visit_type, k) for k in range(self.shards(visit_type))]

    def generation(self, keys: VisitTypeKeys) -> str:
        """The generation of the keys under the prefix of ``keys``: for live keys,
        the one their meta names ('0' before any rebuild); for staging keys, the
        one of the rebuild in progress (the end of its marker), as the Lua
        scripts read them."""
        if keys.prefix:
            marker = self.client.get(keys.meta)
            if marker is None:
                raise LookupError(f"{keys.visit_type}: no rebuild in progress")
            return _text(marker).rsplit(" ", 1)[-1].rsplit(":", 1)[-1]
        try:
            return _live_generation(self.client.hget(keys.meta, "versions"))
        except redis.ResponseError:  # a meta of the wrong type (``corruptions``)
            return "0"

    def pool_counts(self, visit_type: str, pools: Sequence[str] = POOLS) -> list[int]:
        """How many origins wait in the ``pools`` of each shard."""
        every = self.shard_keys(visit_type)
        pipe = self.client.pipeline(transaction=False)
        for keys in every:
            pipe.hget(keys.meta, "versions")
        generations = [_live_generation(g) for g in pipe.execute(raise_on_error=False)]
        pipe = self.client.pipeline(transaction=False)
        for keys, generation in zip(every, generations, strict=True):
            pipe.hmget(keys.pool_counts(generation), [pool_number(p) for p in pools])
        return [sum(int(n or 0) for n in got) for got in pipe.execute()]


class MirrorReads(MirrorKeys):
    """What reads the mirror's places without moving anything."""

    def corruptions(self, visit_type: str, members: bool = True) -> list[Corruption]:
        """The keys of the mirror of ``visit_type`` of the wrong type and, with
        ``members``, the members of its places that are no stats id (a scan of
        every key, as long as ``mirror check``)."""
        found: list[Corruption] = []
        for keys in self.shard_keys(visit_type):
            expected = key_types(keys, self.generation(keys))
            pipe = self.client.pipeline(transaction=False)
            for key, _ in expected:
                pipe.type(key)
            for (key, want), got in zip(expected, pipe.execute(), strict=True):
                kind = _text(got)
                if kind not in ("none", want):
                    found.append(Corruption(key, f"a {kind}, expected a {want}"))
                elif members and kind == "zset":
                    if key in (keys.inflight, keys.cooling):
                        found += self._not_ids(key)
                    else:  # a pool's index: its entries are '<bound> <bucket>'
                        buckets: Any = self.client.zrange(key, 0, -1)
                        for bucket in buckets:
                            found += self._not_ids(f"{key}:{_text(bucket).rsplit(' ', 1)[-1]}")
        return found

    def _not_ids(self, key: str) -> list[Corruption]:
        return [
            Corruption(key, f"member {member!r} is no id", member)
            for member, _ in self.client.zscan_iter(key, match=_NOT_AN_ID, count=5000)
        ]

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
        """Every place of every origin, and where each origin in flight or cooling
        returns to, read in one script per shard (read.lua) so no move by another
        process falls between two keys. An origin may show up in several places
        (a fault): each is listed, for ``mirror check``."""
        found: dict[int, list[tuple[str, float]]] = {}
        parked: dict[int, tuple[str, float] | None] = {}
        for keys in self.shard_keys(visit_type):
            *members, backs = self._read(keys=[*keys.data_keys(), keys.meta], args=["snapshot"])
            for place, pairs in zip([*POOLS, "inflight", "cooling"], members, strict=True):
                for k in range(0, len(pairs), 2):
                    found.setdefault(int(pairs[k]), []).append((place, float(pairs[k + 1])))
            parked.update(
                {int(backs[k]): parse_entry(backs[k + 1]) for k in range(0, len(backs), 2)}
            )
        return found, parked

    def recount(self, visit_type: str) -> list[int]:
        """Set each pool's size to what its buckets hold, after a hand-made change
        (``mirror repair``); return how many each shard's pools hold."""
        return [
            sum(int(n) for n in self._read(keys=[*keys.data_keys(), keys.meta], args=["recount"]))
            for keys in self.shard_keys(visit_type)
        ]

    def _bucket_of(
        self, keys: VisitTypeKeys, generation: str, pool: str, score: float, member: bytes
    ) -> tuple[str | None, int]:
        """The bucket of ``pool`` whose range holds (``score``, ``member``), in the
        order Redis keeps a sorted set, and how many members the buckets before
        it hold."""
        index: Any = self.client.zrange(keys.pool_index(generation, pool), 0, -1, withscores=True)
        before = [e for e, bound in index if (bound, e.rsplit(b" ", 1)[0]) <= (score, member)]
        if not before:
            return None, 0
        pipe = self.client.pipeline(transaction=False)
        for entry in before[:-1]:
            pipe.zcard(keys.pool_bucket(generation, pool, entry))
        return keys.pool_bucket(generation, pool, before[-1]), sum(pipe.execute())

    def _pool_score(
        self, keys: VisitTypeKeys, generation: str, origin_id: int
    ) -> tuple[str, float] | None:
        """The pool and score ``origin_id``'s entry names (in it, or to return to)."""
        key, field = keys.version_bucket(generation, origin_id)
        return parse_entry(self.client.hget(key, str(field)))

    def locate(self, visit_type: str, origin_id: int) -> Location:
        """Where one origin is, with its score and rank (across every shard: the
        origins of its place with a lower score)."""
        shards = self.shards(visit_type)
        keys = self.keys(visit_type, shard_of(origin_id, shards))
        resting: list[tuple[Where, str]] = [("inflight", keys.inflight), ("cooling", keys.cooling)]
        for place, key in resting:
            score = self.client.zscore(key, origin_id)
            if score is not None:
                found: Any = self.client.zrank(key, origin_id)
                rank = int(found or 0)
                for other in self.shard_keys(visit_type):
                    if other.shard != keys.shard:
                        below = other.inflight if place == "inflight" else other.cooling
                        rank += int(self.client.zcount(below, "-inf", f"({score!r}"))
                return Location(place, None, float(score), rank)
        generation = self.generation(keys)
        entry = self._pool_score(keys, generation, origin_id)
        if entry is not None:
            pool, score = entry
            bucket, before = self._bucket_of(keys, generation, pool, score, b"%d" % origin_id)
            own: Any = None if bucket is None else self.client.zrank(bucket, origin_id)
            if own is not None:
                rank = before + int(own)
                for other in self.shard_keys(visit_type):
                    if other.shard != keys.shard:
                        rank += self._below(other, pool, score)
                return Location("pool", pool, score, rank)
        return Location("absent", None, None, None)

    def _below(self, keys: VisitTypeKeys, pool: str, score: float) -> int:
        """How many origins of one shard's pool have a lower score than ``score``."""
        bucket, before = self._bucket_of(keys, self.generation(keys), pool, score, b"")
        if bucket is None:
            return 0
        return before + int(self.client.zcount(bucket, "-inf", f"({score!r}"))

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

    def sent_between(self, visit_type: str, after_s: float, until_s: float) -> list[int]:
        """The origins in flight sent after ``after_s`` and by ``until_s`` (unix s):
        the in-flight scores, across every shard."""
        pipe = self.client.pipeline(transaction=False)
        for keys in self.shard_keys(visit_type):
            pipe.zrangebyscore(keys.inflight, f"({after_s!r}", repr(until_s))
        return [int(m) for members in pipe.execute() for m in members if is_id(m)]

    def sizes(self, visit_type: str) -> dict[str, int]:
        """How many origins each place holds (pools by name, inflight, cooling)."""
        totals: dict[str, int] = dict.fromkeys([*POOLS, "inflight", "cooling"], 0)
        for keys in self.shard_keys(visit_type):
            pipe = self.client.pipeline(transaction=False)
            pipe.hmget(keys.pool_counts(self.generation(keys)), [1, 2, 3, 4])
            pipe.zcard(keys.inflight)
            pipe.zcard(keys.cooling)
            counts, inflight, cooling = pipe.execute()
            for pool, n in zip(POOLS, counts, strict=True):
                totals[pool] += int(n or 0)
            totals["inflight"] += int(inflight)
            totals["cooling"] += int(cooling)
        return totals

    def head_score(self, visit_type: str, pool: PoolName) -> float | None:
        """The score of the first origin of a pool, across every shard (None: empty)."""
        scores: list[float] = []
        for keys in self.shard_keys(visit_type):
            generation = self.generation(keys)
            first: Any = self.client.zrange(keys.pool_index(generation, pool), 0, 0)
            if first:
                head = self.client.zrange(
                    keys.pool_bucket(generation, pool, first[0]), 0, 0, withscores=True
                )
                scores += [float(h[1]) for h in head]
        return min(scores) if scores else None


def is_id(member: Any) -> bool:
    """A member that is no stats id is a hand-made mistake (``mirror check``
    names it, ``mirror repair`` removes it): skipped, not a failed step."""
    return isinstance(member, int) or bytes(member).isdigit()


def _live_generation(versions: Any) -> str:
    """The live generation a meta's ``versions`` field names ('0' when it has none,
    or the meta is of the wrong type: ``corruptions``)."""
    return _text(versions) if isinstance(versions, bytes | str) else "0"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
