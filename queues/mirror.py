"""The Redis side of the scheduling mirror: placing, popping, rebuilding, reading."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any
from uuid import uuid4

import redis

from app.domain.placement import POOLS, Placement
from queues import lua
from queues.keys import LAYOUT, STAGED_BUCKET, VisitTypeKeys, pool_number, scheduler_lease
from queues.lease import LeaseLost, holder_name
from queues.mirror_meta import PickBookkeeping
from queues.mirror_read import Corruption, MirrorReads, is_id
from queues.mirror_read import Location as Location
from queues.shards import (
    DueRank,
    by_shard,
    claim_across,
    due_split,
    first_visit_parts,
    pop_across,
    split_count,
)
from queues.shards import Popped as Popped
from queues.shards import PopResult as PopResult
from queues.shards import Weights as Weights
from queues.sorted_runs import SortedRuns

PLACE_CHUNK = 2000
#: Placements per pipeline of plain writes (a rebuild's bulk, new origins).
REBUILD_CHUNK = 5000
#: The rebuild-in-progress marker outlives a dead rebuild by at most this (s);
#: a rebuild that makes no progress (no write, no batch read back) this long
#: stops renewing it, and its caller's lease.
REBUILD_MARKER_TTL_S = 600
#: How often a running rebuild renews its marker unless told otherwise (s).
REBUILD_RENEW_S = 60.0
#: Origins taken per SPOP from a rebuild's touched set once its bulk phase ends.
TOUCHED_BATCH = 10_000
MAX_MOVES_PER_POP = 10000
#: Lua place index of each place (pools are 1..4 in POOLS order).
PLACE_INDEX: dict[str, int] = {"absent": 0, "inflight": 5, "cooling": 6}
POOL_INDEX: dict[str, int] = {name: i + 1 for i, name in enumerate(POOLS)}


def parked_value(p: Placement) -> str:
    """Where an origin in flight or cooling returns, as place.lua takes it."""
    return f"{POOL_INDEX[p.pool]}|{p.pool_score!r}"


def returns_to(p: Placement) -> tuple[str, float]:
    """The (pool name, score) an origin returns to after resting."""
    return p.pool, p.pool_score


class RebuildInProgress(Exception):
    """Another process is rebuilding the visit type's mirror."""


class RebuildLost(Exception):
    """A rebuild's marker lapsed (not renewed for ``REBUILD_MARKER_TTL_S``) and another
    rebuild took it over: this one's staging keys were not swapped in."""


def _chunks(items: Iterable[Placement], size: int) -> Iterator[list[Placement]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


#: The mirror lives in one Redis or on a Redis Cluster (keys of one visit type,
#: or of one shard, share a hash slot, which the Lua scripts need).
MirrorClient = redis.Redis | redis.RedisCluster


def connect_mirror(url: str, *, cluster: bool) -> MirrorClient:
    """A client of the mirror's Redis at ``url``: a cluster client with ``cluster``."""
    return redis.RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)


class Mirror(PickBookkeeping, MirrorReads):
    """The mirror of every visit type, in one Redis database or on a cluster;
    a visit type's keys may be split into shards (``queues.shards``)."""

    def __init__(
        self, client: MirrorClient, namespace: str, shards: Mapping[str, int] | None = None
    ) -> None:
        super().__init__(client, namespace, shards)
        pop, fence = lua("bulk") + lua("pop"), lua("fence")
        self._pop = client.register_script(pop)
        self._place = client.register_script(lua("bulk") + lua("place"))
        self._claim = client.register_script(lua("bulk") + lua("claim"))
        self._rebuild = client.register_script(lua("rebuild"))
        self._guarded = {
            "pop": client.register_script(fence + pop),
            "claim": client.register_script(fence + lua("bulk") + lua("claim")),
        }
        #: The lease token of each visit type this process pops under (fence.lua).
        self.fences: dict[str, str] = {}
        #: Called with the visit type every ``rebuild_renew_s`` while a rebuild
        #: runs (``renewing``): the scheduler renews its lease there, since a
        #: rebuild at archive scale outlasts it.
        self.on_rebuild_renew: Callable[[str], None] | None = None
        self.rebuild_renew_s = REBUILD_RENEW_S
        #: When each rebuild in progress last wrote or read back a batch (monotonic s).
        self._rebuild_progress: dict[str, float] = {}

    def _split(self, visit_type: str, placements: Iterable[Placement]) -> dict[int, Any]:
        shards = self.shards(visit_type)
        return {0: placements} if shards == 1 else by_shard(placements, shards)

    def place(
        self,
        visit_type: str,
        placements: Iterable[Placement],
        *,
        keep_inflight: bool = False,
        repair: bool = False,
    ) -> int:
        """Move origins to the places given; return how many moved.

        ``keep_inflight`` leaves origins that Redis has in flight alone (for
        writers that do not know about a pop still being recorded). ``repair``
        also takes an origin out of its pool when it was in flight or cooling
        too (a mirror damaged by hand); otherwise an origin is trusted to be in
        one place.
        """
        mode = "keep_inflight" if keep_inflight else "repair" if repair else "force"
        return sum(
            self._place_chunks(self.keys(visit_type, shard), mode, part)
            for shard, part in self._split(visit_type, placements).items()
        )

    def _place_chunks(self, keys: VisitTypeKeys, mode: str, placements: Iterable[Placement]) -> int:
        """Run place.lua over ``placements`` in chunks (KEYS: the keys it writes of
        ``keys`` and of their staging, the staging marker and touched set, the meta)."""
        staging = keys.staging()
        script_keys = [*keys.data_keys(), *staging.data_keys(), staging.meta, staging.touched]
        script_keys.append(keys.meta)
        return sum(
            int(self._place(keys=script_keys, args=_place_args(mode, chunk)))
            for chunk in _chunks(placements, PLACE_CHUNK)
        )

    def add_new(self, visit_type: str, placements: Iterable[Placement]) -> int:
        """Add origins that cannot be in the mirror yet (just created in Postgres),
        for bulk listings: place.lua puts them in their place without looking for
        an older one, or, while a rebuild is in progress (which may have read
        Postgres before they existed), places them as any placement."""
        added = 0
        for shard, part in self._split(visit_type, placements).items():
            keys = self.keys(visit_type, shard)
            mode = "force" if self.client.exists(keys.staging().meta) else "new"
            added += self._place_chunks(keys, mode, part)
        return added

    def pop(
        self,
        visit_type: str,
        count: int,
        now_s: float,
        scheduled_cooldown_s: float,
        weights: Weights = "auto",
        *,
        peek: bool = False,
        first_visit_share: float = 0.0,
        overload_margin_s: float = 0.0,
    ) -> PopResult:
        """Atomically move up to ``count`` origins, split across the pools by
        ``weights`` (one per pool in POOLS order, or 'auto', or 'due' with the
        ``first_visit_share`` of each batch kept for never visited origins, and
        a non-zero ``overload_margin_s`` letting up_to_date origins wait for
        the rest, as pop.lua says), to in flight.
        With ``peek``, only say which origins that would be; nothing moves.
        A sharded visit type is popped shard by shard (``queues.shards``)."""
        weight_args = (
            [weights, repr(float(first_visit_share)), repr(float(overload_margin_s)), 0]
            if isinstance(weights, str)
            else [repr(float(w)) for w in weights]
        )
        if len(weight_args) != len(POOLS):
            raise ValueError(f"weights: expected {len(POOLS)} values, got {len(weight_args)}")
        mode = "peek" if peek else "pop"
        shards = self.shards(visit_type)
        # A shard's part of the batch its first-visit share is of (due only).
        first_of: list[float] = []
        if weights == "due" and shards > 1:
            first_of = [0.0] * shards
            if first_visit_share > 0:
                never = self.pool_counts(visit_type, ["never_visited"])
                first_of = first_visit_parts(count, never)

        def pop_from(shard: int, n: int) -> PopResult:
            of = ["", repr(first_of[shard])] if first_of else []
            cooled, lost, flat = self._run_pop(
                visit_type, shard, [now_s, n, scheduled_cooldown_s, *weight_args, mode, *of]
            )
            return PopResult(_popped_by_pool(flat), int(cooled), int(lost))

        if shards == 1:
            return pop_from(0, count)
        cooled = lost = 0
        if first_of:
            asked, cooled, lost = due_split(
                lambda shard: self.due_order(
                    visit_type,
                    shard,
                    count,
                    now_s,
                    scheduled_cooldown_s,
                    peek=peek,
                    overload_margin_s=overload_margin_s,
                    first_visit=(first_visit_share, first_of[shard]),
                ),
                shards,
                count,
            )
        else:
            asked = split_count(count, self.pool_counts(visit_type))
        return pop_across(pop_from, asked, count, peek=peek, returned=(cooled, lost))

    def due_order(
        self,
        visit_type: str,
        shard: int,
        count: int,
        now_s: float,
        scheduled_cooldown_s: float,
        *,
        peek: bool,
        overload_margin_s: float = 0.0,
        first_visit: tuple[float, float] = (0.0, 0.0),
    ) -> DueRank:
        """What a 'due' pop of ``count`` origins from one shard would take, with
        ``first_visit``'s share (of the batch it names) set apart for never
        visited origins, and how many origins came back from cooling and from
        lost visits (unless ``peek``, as a pop does); nothing is taken."""
        share, of = (repr(float(x)) for x in first_visit)
        margin = repr(float(overload_margin_s))
        rest = ["due", share, margin, 0, "peek" if peek else "pop", "rank", of]
        cooled, lost, _, dues, first = self._run_pop(
            visit_type, shard, [now_s, count, scheduled_cooldown_s, *rest]
        )
        return DueRank(int(first), [float(d) for d in dues], int(cooled), int(lost))

    def _run_pop(self, visit_type: str, shard: int, args: list[Any]) -> Any:
        """pop.lua on one shard; ``args`` are its ARGV but the move limit (ARGV[4])."""
        keys = self.keys(visit_type, shard)
        now_s, count, scheduled_cooldown_s, *rest = args
        script_keys = [*keys.data_keys(), keys.meta]
        limits = [repr(now_s), count, repr(scheduled_cooldown_s), MAX_MOVES_PER_POP]
        return self._fenced("pop", keys, script_keys=script_keys, args=[*limits, *rest])

    def claim(
        self,
        visit_type: str,
        ids: Sequence[int],
        now_s: float,
        most: int,
        *,
        peek: bool = False,
        shard: int | None = None,
    ) -> list[Popped]:
        """Move up to ``most`` of the given origins that wait in a pool to in flight,
        atomically, in the given order; origins resting or in flight are skipped.
        With ``peek``, only say which; nothing moves."""
        if not ids or most <= 0:
            return []
        if shard is None and self.shards(visit_type) > 1:
            return claim_across(
                lambda shard, group: self.claim(
                    visit_type, group, now_s, len(group), peek=peek, shard=shard
                ),
                self.shards(visit_type),
                ids,
                most,
            )
        keys = self.keys(visit_type, shard or 0)
        limit = -most if peek else most
        args = [repr(now_s), limit, *ids]
        script_keys = [*keys.data_keys(), keys.meta]
        flat = self._fenced("claim", keys, script_keys=script_keys, args=args)
        return [
            Popped(int(flat[i]), POOLS[int(flat[i + 1]) - 1], float(flat[i + 2]))
            for i in range(0, len(flat), 3)
            if is_id(flat[i])
        ]

    def _fenced(
        self, name: str, keys: VisitTypeKeys, script_keys: list[str], args: list[Any]
    ) -> Any:
        """Run pop or claim on one shard; while this process holds a lease token
        for the visit type (``fences``), only if that token still holds the lease."""
        token = self.fences.get(keys.visit_type)
        if token is None:
            return (self._pop if name == "pop" else self._claim)(keys=script_keys, args=args)
        lease = scheduler_lease(self.namespace, keys.visit_type, keys.shard)
        try:
            return self._guarded[name](keys=[*script_keys, lease], args=[*args, token])
        except redis.ResponseError as exc:
            if "LEASE_LOST" in str(exc):
                raise LeaseLost(f"{keys.visit_type}: {exc}") from exc
            raise

    def is_built(self, visit_type: str) -> bool:
        """Whether the mirror of ``visit_type`` exists (it is lost when Redis restarts
        empty) with as many shards as configured (else it must be rebuilt)."""
        every = self.shard_keys(visit_type)
        metas = [self.client.hmget(keys.meta, ["shards", "versions", "layout"]) for keys in every]
        # Each swap writes the shard count, the generation of its keys and the
        # layout into its shard's meta. Rebuilt must be: a meta gone, one of
        # another count (a rebuild into a new split stopped between two swaps;
        # no count is shard 0's, which counts as one shard), one naming no
        # generation (a repaired meta) or another layout (a mirror from before
        # the bucketed pools).
        first = metas[0][0]
        return all(
            versions is not None
            and layout is not None
            and _text(layout) == LAYOUT
            and int(shards or first or 1) == len(every)
            for shards, versions, layout in metas
        )

    def remove_corruptions(self, visit_type: str, found: Iterable[Corruption]) -> None:
        """Delete each key of the wrong type and remove each member that is no id
        (``corruptions``' findings), then count the pools again. A meta hash
        deleted is written again with its shard count only: without the
        generation of its keys, the mirror counts as not built, and the
        scheduler rebuilds it."""
        every = self.shard_keys(visit_type)
        found = list(found)
        for corruption in found:
            if corruption.member is None:
                self.client.delete(corruption.key)
                if corruption.key in {keys.meta for keys in every}:
                    self.client.hset(corruption.key, "shards", len(every))
            else:
                self.client.zrem(corruption.key, corruption.member)
        if found and self.is_built(visit_type):
            self.recount(visit_type)

    def begin_rebuild(self, visit_type: str) -> str:
        """Empty the staging keys of every shard and mark a rebuild in progress,
        in its 'bulk' phase: from now on every ``place`` records its origins
        in the staging ``touched`` set. Read the placements to ``stage`` from
        Postgres only after this returns. Return the rebuild's token, for
        ``end_bulk`` and ``finish_rebuild``.

        Raise ``RebuildInProgress`` if another rebuild of the visit type holds
        the marker (it lapses ``REBUILD_MARKER_TTL_S`` after that rebuild's
        last renewal if it died: ``renewing``).
        """
        token = f"{holder_name()}:{uuid4().hex[:8]}"
        for live in self.shard_keys(visit_type):
            nx = "nx" if live.shard == 0 else ""
            held = self._rebuild_step(live, "begin", token, REBUILD_MARKER_TTL_S, nx)
            if held is not None:
                holder = held.decode() if isinstance(held, bytes) else str(held)
                raise RebuildInProgress(
                    f"a rebuild of the {visit_type} mirror is in progress "
                    f"({holder.split(' ', 1)[-1]}); it ends with its swap, or lapses "
                    f"{REBUILD_MARKER_TTL_S} s after its last renewal if it died"
                )
        # Holding the marker, no other rebuild can swap: the version buckets of
        # rebuilds that died are garbage.
        for live in self.shard_keys(visit_type):
            kept = {self._generation(live.staging()), self._generation(live)}
            self._drop_versions(live, keep=kept)
        return token

    def stage(self, visit_type: str, placements: Iterable[Placement]) -> None:
        """Write ``placements`` into the staging keys of a rebuild in its 'bulk'
        phase, with plain variadic writes (no version check: nothing else
        writes those keys then): the entries, inflight and cooling as they
        come; each pool's origins, sorted by score, last, in buckets of
        ``STAGED_BUCKET`` (room for placements before a split). The swap
        counts what they hold. A second call places through place.lua.
        """
        staging = {keys.shard: keys.staging() for keys in self.shard_keys(visit_type)}
        generations = {shard: self._generation(keys) for shard, keys in staging.items()}
        if any(
            self.client.exists(keys.pool_counts(generations[shard]))
            for shard, keys in staging.items()
        ):
            for shard, part in self._split(visit_type, placements).items():
                self._place_chunks(staging[shard], "force", part)
            return
        runs = SortedRuns()  # each pool's members, by (shard, pool)
        try:
            for chunk in _chunks(placements, REBUILD_CHUNK):
                pipe = self.client.pipeline(transaction=False)
                for shard, part in self._split(visit_type, chunk).items():
                    _stage(pipe, staging[shard], part, generations[shard], runs)
                pipe.execute()
                self._progressed(visit_type)
            for shard, keys in staging.items():
                _stage_pools(self.client, keys, generations[shard], runs)
                self._progressed(visit_type)
        finally:
            runs.close()

    def end_bulk(self, visit_type: str, token: str) -> set[int]:
        """End a rebuild's 'bulk' phase: from now on ``place`` applies to the
        staging keys too, keeping the newest version. Return the origins
        placed during that phase: read them again from Postgres and
        ``place_staged`` them, since the bulk writes may hold an older place.

        Once the phase is 'direct' nothing adds to the touched set, so it is
        drained TOUCHED_BATCH at a time: a long rebuild of an archive may
        gather millions, and one SMEMBERS would block Redis while it replies.
        Raise ``RebuildLost`` if the marker is no longer this rebuild's
        (rebuild.lua): the newer rebuild's phase is then left alone.
        """
        touched: set[int] = set()
        for live in self.shard_keys(visit_type):
            if not self._rebuild_step(live, "direct", token, REBUILD_MARKER_TTL_S):
                raise RebuildLost(
                    f"the rebuild of the {visit_type} mirror lost its marker before the end of"
                    f" its bulk writes (not renewed for {REBUILD_MARKER_TTL_S} s, then taken over)"
                )
            while members := self.client.spop(live.staging().touched, TOUCHED_BATCH):
                touched.update(int(m) for m in members)
                self._progressed(visit_type)
        return touched

    @contextlib.contextmanager
    def renewing(self, visit_type: str) -> Iterator[None]:
        """Keep the rebuild of ``visit_type`` alive while the block runs: a thread
        renews its marker (and touched sets), and calls ``on_rebuild_renew``,
        every ``rebuild_renew_s``, whatever the rebuild is doing (a long query
        writes nothing). Once the rebuild has made no progress for
        ``REBUILD_MARKER_TTL_S`` (stuck for good), the thread stops renewing:
        its marker and its caller's lease lapse for another process."""
        stop = threading.Event()
        self._progressed(visit_type)

        def keep() -> None:
            while not stop.wait(self.rebuild_renew_s):
                stalled_s = time.monotonic() - self._rebuild_progress[visit_type]
                if stalled_s < REBUILD_MARKER_TTL_S:
                    with contextlib.suppress(redis.RedisError):  # the rebuild fails too
                        self._renew_rebuild(visit_type)

        keeper = threading.Thread(target=keep, name=f"rebuild {visit_type}", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()
            del self._rebuild_progress[visit_type]

    def _renew_rebuild(self, visit_type: str) -> None:
        """Renew a rebuild's marker and, with it, the origins placed meanwhile (which
        must outlive every renewal of the marker, or they would not be read again);
        then whatever the caller renews with it."""
        pipe = self.client.pipeline(transaction=False)
        for live in self.shard_keys(visit_type):
            pipe.expire(live.staging().meta, REBUILD_MARKER_TTL_S)
            pipe.expire(live.staging().touched, REBUILD_MARKER_TTL_S)
        pipe.execute()
        if self.on_rebuild_renew is not None:
            self.on_rebuild_renew(visit_type)

    def _progressed(self, visit_type: str) -> None:
        self._rebuild_progress[visit_type] = time.monotonic()

    def abort_rebuild(self, visit_type: str, token: str) -> None:
        """Drop a failed rebuild's staging keys and release its marker (where it
        still holds it), so that the next rebuild need not wait for it to lapse."""
        generation = token.rsplit(":", 1)[-1]
        for live in self.shard_keys(visit_type):
            self._rebuild_step(live, "abort", token)
            # A shard it swapped already keeps its keys: they are the live ones.
            if self.generation(live) != generation:
                self._drop_versions(live, only=generation)

    def place_staged(self, visit_type: str, placements: Iterable[Placement]) -> int:
        """Apply ``placements`` to the staging keys of a rebuild past its 'bulk'
        phase, as ``place`` does to the live keys (the newest version wins)."""
        self._progressed(visit_type)
        return sum(
            self._place_chunks(self.keys(visit_type, shard).staging(), "force", part)
            for shard, part in self._split(visit_type, placements).items()
        )

    def finish_rebuild(self, visit_type: str, token: str) -> int:
        """Swap every shard's staging keys in for its live keys; return how many
        origins the new mirror holds. Raise ``RebuildLost`` if the rebuild's
        marker lapsed and another rebuild took it over.

        Each swap writes the shard count into its shard's meta (rebuild.lua), so
        a rebuild that stops after its last swap leaves a built mirror. The
        shards of a larger split, unused now, go first: stopped before its
        swaps, the rebuild leaves a mirror still to be rebuilt, which deletes
        them again."""
        every = self.shard_keys(visit_type)
        built = int(self.client.hget(every[0].meta, "shards") or 1)
        for gone in range(len(every), built):
            gone_keys = self.keys(visit_type, gone)
            for key in [*gone_keys.data_keys(), *gone_keys.legacy_keys(), gone_keys.meta]:
                self.client.delete(key)
            self._drop_versions(self.keys(visit_type, gone))
        replaced = [self._generation(live) for live in every]
        origins = 0
        for live in every:
            try:
                swapped = self._rebuild_step(live, "swap", token, repr(time.time()), len(every))
            except redis.ResponseError as exc:
                if "REBUILD_LOST" in str(exc):
                    raise RebuildLost(f"{visit_type}: {exc}") from exc
                raise
            origins += int(swapped)
        for live, old in zip(every, replaced, strict=True):
            self._drop_versions(live, only=old)
        return origins

    def _generation(self, keys: VisitTypeKeys) -> str:
        """``generation``, for a rebuild: ``RebuildLost`` once its marker is gone."""
        try:
            return self.generation(keys)
        except LookupError as exc:
            raise RebuildLost(str(exc)) from exc

    def _drop_versions(
        self, keys: VisitTypeKeys, *, keep: Collection[str] = (), only: str | None = None
    ) -> None:
        """Delete the keys of a generation (version buckets, pools) of one shard
        (those of generation ``only``, or of every generation but ``keep``):
        garbage, of the generation a swap replaced or of a rebuild that was
        aborted or died; a batch at a time."""
        start = len(keys.versions) + 1
        match = f"{keys.versions}:{'*' if only is None else only + ':*'}"
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=match, count=5000):
            if _text(key)[start:].split(":", 1)[0] not in keep:
                batch.append(key)
            if len(batch) >= 1000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)

    def _rebuild_step(self, live: VisitTypeKeys, step: str, token: str, *args: Any) -> Any:
        """Run one step of rebuild.lua on one shard (``live``: its keys)."""
        staging = live.staging()
        keys = [*live.data_keys(), *staging.data_keys(), live.meta, staging.meta, staging.touched]
        keys += [*live.legacy_keys(), *staging.legacy_keys()]
        return self._rebuild(keys=keys, args=[step, token, *args])


def _place_args(mode: str, chunk: Iterable[Placement]) -> list[Any]:
    """place.lua's ARGV: the mode, then five values per placement. Where an origin
    returns to is formatted only where place.lua reads it: for an origin in flight
    or cooling, and, in 'keep_inflight', for any (it may be in flight in Redis)."""
    args: list[Any] = [mode]
    every = mode == "keep_inflight"
    for p in chunk:
        where = p.where
        if where == "pool":
            back = parked_value(p) if every else ""
            args += [p.id, p.version, POOL_INDEX[p.pool], repr(p.score), back]
        else:
            back = parked_value(p) if every or where != "absent" else ""
            args += [p.id, p.version, PLACE_INDEX[where], repr(p.score), back]
    return args


def _popped_by_pool(reply: list[Any]) -> list[Popped]:
    """The origins of pop.lua's compact reply: per pool, its index then its
    (id, score) pairs."""
    popped: list[Popped] = []
    for k in range(0, len(reply), 2):
        pool = POOLS[int(reply[k]) - 1]
        flat = reply[k + 1]
        try:
            ids = list(map(int, flat[0::2]))
        except ValueError:
            ids = [int(m) if is_id(m) else -1 for m in flat[0::2]]
        popped += (
            Popped(origin, pool, float(score))
            for origin, score in zip(ids, flat[1::2], strict=True)
            if origin >= 0
        )
    return popped


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _stage(
    pipe: Any,
    keys: VisitTypeKeys,
    chunk: list[Placement],
    generation: str,
    runs: SortedRuns,
) -> None:
    """Queue on ``pipe`` the plain writes of ``chunk`` into ``keys``: one ZADD per
    resting place and one HSET of entries per version bucket; keep each pool's
    origins in ``runs`` (by shard and pool) for ``_stage_pools``."""
    resting: defaultdict[str, dict[str, float]] = defaultdict(dict)
    entries: defaultdict[str, dict[int, str]] = defaultdict(dict)
    for p in chunk:
        bucket, field = keys.version_bucket(generation, p.id)
        if p.where == "absent":
            if p.version:
                entries[bucket][field] = str(p.version)
            continue
        score = p.score if p.where == "pool" else p.pool_score
        entries[bucket][field] = f"{p.version} {POOL_INDEX[p.pool]} {score!r}"
        if p.where == "pool":
            runs.add((keys.shard, p.pool), p.score, str(p.id))
        else:
            resting[keys.inflight if p.where == "inflight" else keys.cooling][str(p.id)] = p.score
    for key, members in resting.items():
        pipe.zadd(key, members)
    for bucket, fields in entries.items():
        pipe.hset(bucket, mapping=fields)


def _stage_pools(client: Any, keys: VisitTypeKeys, generation: str, runs: SortedRuns) -> None:
    """Write each pool's origins, in the order Redis keeps them (by score, then
    by member: the id's text), into buckets of ``STAGED_BUCKET``, with the
    pool's index (entries ``<bound member> <bucket>``) and size."""
    numbered = 0
    counts: dict[str, int] = {}
    for name in POOLS:
        counts[str(pool_number(name))] = runs.count((keys.shard, name))
        ordered = runs.ordered((keys.shard, name))
        pipe = client.pipeline(transaction=False)
        bounds: dict[str, float] = {}
        while part := list(islice(ordered, STAGED_BUCKET)):
            numbered += 1
            # Highest first: Redis inserts each into the listpack from its head.
            pipe.zadd(
                keys.pool_bucket(generation, name, numbered),
                {origin: score for score, origin in reversed(part)},
            )
            bounds[f"{part[0][1]} {numbered}"] = part[0][0]
            if len(bounds) >= REBUILD_CHUNK // STAGED_BUCKET:
                pipe.zadd(keys.pool_index(generation, name), bounds)
                pipe.execute()
                pipe, bounds = client.pipeline(transaction=False), {}
        if bounds:
            pipe.zadd(keys.pool_index(generation, name), bounds)
        pipe.execute()
    client.hset(keys.pool_counts(generation), mapping={**counts, "next": numbered})
