"""Every Redis key revisit writes, in one place.

All keys of one visit type share the hash tag ``{<visit_type>}`` so that, on a
Redis Cluster, a visit type's pools live on one slot and the Lua scripts that
move origins between them stay atomic. A visit type split into N shards
(``REVISIT_MIRROR_SHARDS``) has N such key sets: shard 0 keeps ``{<vt>}``,
shard k > 0 uses ``{<vt>#k}``, and origin ``id`` lives in shard ``id mod N``
(``shard_of``), so the shards spread over the cluster's masters.

| key (``V``: ``<ns>:{<vt>}:version``) | type | member | score / value           |
|------------------------------|------|------------|-------------------------------|
| ``<ns>:{<vt>}:inflight``     | zset | stats id   | when scheduled (unix s)       |
| ``<ns>:{<vt>}:cooling``      | zset | stats id   | when it may be visited again  |
| ``<ns>:{<vt>}:meta``         | hash | field      | bookkeeping (*)               |
| ``V:<g>:<b>``                | hash | id mod 256 | the origin's entry (***)      |
| ``V:<g>:p<i>``               | zset | bound, n   | pool i's buckets by bound (****) |
| ``V:<g>:p<i>:<n>``           | zset | stats id   | the pool's order (placement)  |
| ``V:<g>:count``              | hash | i, next    | pool i's size; last bucket    |
| ``<ns>:{<vt>}:lateness``     | list | seconds    | lateness of planned picks     |
| ``<ns>:{<vt>}:rebuild:*``    |      |            | a rebuild's staging keys (**) |

(**) Its inflight, cooling, marker and touched set; inflight and cooling are
renamed over the live keys when the rebuild ends. ``rebuild:meta`` is a
string while the rebuild runs, ``<phase> <host>:<pid>:<token>``, and one
rebuild at a time holds it: phase ``bulk`` while it writes the staging keys
(placements meanwhile only add their origin to the set ``rebuild:touched``),
then ``direct`` (placements are applied to the staging keys too).

(***) One small hash per bucket ``b`` of 256 stats ids (``id div 256``), which
Redis keeps in its compact listpack encoding (``hash-max-listpack-entries``,
default 512). An origin's entry is ``<version>`` or ``<version> <i> <score>``:
the stats row version its place is from (place.lua refuses an older one) and
pool ``i`` (1-4, in ``POOLS`` order) with its score there, or, while it is in
flight or cooling, the pool and score it returns to.
``g``, the generation, is the end of the token of the rebuild that built the
mirror (the meta's ``versions``; ``0`` before any): a rebuild writes its own
generation beside the live one, its swap makes it the live one, and the
rebuild then deletes the older generations' keys.

(****) Each pool is split into buckets ``n`` of at most about 120 members
(a sorted set of at most 128, ``zset-max-listpack-entries``, is one compact
listpack: about 25 bytes an origin instead of about 115 in a skiplist), in
the order Redis keeps a sorted set (by score, then by member). The index
holds ``<bound member> <n>`` scored by the bound's score, for each bucket
its lowest (score, member); a bucket holds the members from its bound to the
next bucket's, so a run of equal scores splits like any other.
queues/lua/bulk.lua's ``Mirror`` adds, removes, splits and pops.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.placement import POOLS

#: Stats ids per version bucket (bulk.lua's BUCKET): at most that many fields,
#: under Redis's default ``hash-max-listpack-entries`` (512).
VERSION_BUCKET = 256
#: The layout a rebuild's swap writes into the meta (``is_built`` wants it).
LAYOUT = "buckets"
#: Origins per pool bucket a rebuild writes (room for placements before a split,
#: which bulk.lua makes past 120 members).
STAGED_BUCKET = 96


@dataclass(frozen=True, slots=True)
class VisitTypeKeys:
    """Key names of one visit type's part of the mirror."""

    namespace: str
    visit_type: str
    prefix: str = ""
    shard: int = 0

    @property
    def tag(self) -> str:
        """The common prefix, carrying the Redis Cluster hash tag."""
        return f"{self.namespace}:{hash_tag(self.visit_type, self.shard)}:{self.prefix}"

    def pool_index(self, generation: str, name: str) -> str:
        """Sorted set of the bucket numbers of one pool, scored by their lower bound."""
        return f"{self.versions}:{generation}:p{pool_number(name)}"

    def pool_bucket(self, generation: str, name: str, bucket: bytes | str | int) -> str:
        """One bucket of a pool (its number, or its index entry ``<bound member>
        <number>``): a small sorted set of its origins by score."""
        return f"{self.pool_index(generation, name)}:{_text(bucket).rsplit(' ', 1)[-1]}"

    def pool_counts(self, generation: str) -> str:
        """Hash of each pool's size (field: its number) and the last bucket number."""
        return f"{self.versions}:{generation}:count"

    @property
    def inflight(self) -> str:
        """Sorted set of the origins sent to a worker, by when they were sent."""
        return f"{self.tag}inflight"

    @property
    def cooling(self) -> str:
        """Sorted set of the origins resting after a visit, by when they may return."""
        return f"{self.tag}cooling"

    @property
    def versions(self) -> str:
        """The prefix of the version buckets, hashes of the stats row version each
        origin's place was derived from (place.lua refuses an older one); the same
        for the live keys and a rebuild's staging keys, which differ by generation."""
        return f"{self.namespace}:{hash_tag(self.visit_type, self.shard)}:version"

    def version_bucket(self, generation: str, origin_id: int) -> tuple[str, int]:
        """The version bucket holding ``origin_id`` in ``generation``, and its field."""
        bucket, field = divmod(origin_id, VERSION_BUCKET)
        return f"{self.versions}:{generation}:{bucket}", field

    @property
    def meta(self) -> str:
        """Hash of bookkeeping; its absence means the mirror must be rebuilt."""
        return f"{self.tag}meta"

    @property
    def touched(self) -> str:
        """Set, among a rebuild's staging keys: the origins placed while the
        rebuild wrote them, read again from Postgres before its swap."""
        return f"{self.tag}touched"

    @property
    def lateness(self) -> str:
        """List of how late (s) the latest planned picks were served (app.services.allocation)."""
        return f"{self.tag}lateness"

    def data_keys(self) -> list[str]:
        """The keys the Lua scripts name for their origins, in their order:
        inflight, cooling, and the prefix of the generation's keys (the entries
        and the bucketed pools)."""
        return [self.inflight, self.cooling, self.versions]

    def legacy_keys(self) -> list[str]:
        """The keys of the layout before the bucketed pools (one sorted set per
        pool, a hash of where resting origins return), deleted by a rebuild."""
        return [*(f"{self.tag}pool:{name}" for name in POOLS), f"{self.tag}parked"]

    def staging(self) -> VisitTypeKeys:
        """Keys of a rebuild in progress, renamed over the live ones when done."""
        return VisitTypeKeys(self.namespace, self.visit_type, "rebuild:", self.shard)


def pool_number(name: str) -> int:
    """A pool's number in the Lua scripts and the keys (1-4, in ``POOLS`` order)."""
    if name not in POOLS:
        raise ValueError(f"unknown pool {name!r} (known: {', '.join(POOLS)})")
    return POOLS.index(name) + 1


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def hash_tag(visit_type: str, shard: int = 0) -> str:
    """The Redis Cluster hash tag of one shard of a visit type's mirror."""
    return f"{{{visit_type}}}" if shard == 0 else f"{{{visit_type}#{shard}}}"


def shard_of(origin_id: int, shards: int) -> int:
    """The shard an origin's places live in, among ``shards``."""
    return origin_id % shards if shards > 1 else 0


def scheduler_lease(namespace: str, visit_type: str, shard: int = 0) -> str:
    """String ``<token>|<holder>``: the scheduler process feeding a visit type's
    queues, until it expires (lease.lua); in the visit type's hash slot, so a
    pop can check it atomically (fence.lua). Shards k > 0 hold a copy in their
    own slot, written by the holder (queues.lease)."""
    return f"{namespace}:{hash_tag(visit_type, shard)}:lease"


def scheduler_lease_tokens(namespace: str, visit_type: str) -> str:
    """Counter: the last fencing token handed out with a visit type's lease."""
    return f"{namespace}:{{{visit_type}}}:lease_token"


def aborted_requests(namespace: str) -> str:
    """Set of ids of requests cancelled after they were sent to a worker."""
    return f"{namespace}:requests:aborted"


def visiting(namespace: str, visit_type: str, url: str) -> str:
    """String ``<message id> <host>:<pid>:<run>``: the visit of an origin running now
    (actors.visiting), so that no other visit of it starts beside it; kept alive
    by its holder, it expires soon after the holder stops (killed, paused)."""
    return f"{namespace}:{hash_tag(visit_type)}:visiting:{url}"


def queue_workers(namespace: str, queue: str) -> str:
    """Hash of the worker processes serving a Dramatiq queue: process id -> 'threads|unix time'."""
    return f"{namespace}:workers:{queue}"


def queue_durations(namespace: str, queue: str) -> str:
    """List of the durations (s) of the latest visits done from a Dramatiq queue, newest first."""
    return f"{namespace}:durations:{queue}"


def visit_outcomes(namespace: str, visit_type: str) -> str:
    """Hash of how many visits of a visit type ended in each status since the key
    was created (status -> count): the live view's visits/s and failure rate."""
    return f"{namespace}:{{{visit_type}}}:outcomes"


def hoster_slots(namespace: str, host: str) -> str:
    """Key prefix of a hoster's concurrent-visit slots (Dramatiq's ConcurrentRateLimiter
    keeps its counter under it)."""
    return f"{namespace}:hoster:{host}"


def dead_letter_reason(namespace: str, message_id: str) -> str:
    """String: why a Dramatiq message was dead-lettered (expires with the dead letter)."""
    return f"{namespace}:dead_letter_reason:{message_id}"


def uncounted_messages(namespace: str, queue: str) -> str:
    """Set: ids of the messages sent to a Dramatiq queue that are not visits
    (``publish_status``), left out of its depth; in Dramatiq's namespace."""
    return f"{namespace}:revisit.uncounted.{queue}"


#: The prefix of Dramatiq's own keys (its default), in the broker's Redis.
DRAMATIQ_NAMESPACE = "dramatiq"
#: Dramatiq's suffix of a queue's dead-letter set (``DramatiqQueueKeys.dead``).
DRAMATIQ_DEAD_SUFFIX = ".XQ"


@dataclass(frozen=True, slots=True)
class DramatiqQueueKeys:
    """Key names of one Dramatiq queue, as Dramatiq's Redis broker lays them out
    (its ``dispatch.lua``); ``tests/integration/test_broker.py`` checks them
    against a real broker and worker.

    | key                  | type | holds                                               |
    |----------------------|------|-----------------------------------------------------|
    | ``<ns>:<q>``         | list | ids of messages waiting                             |
    | ``<ns>:<q>.msgs``    | hash | id -> encoded message, waiting or running (unacked) |
    | ``<ns>:<q>.DQ.msgs`` | hash | messages delayed (retries with backoff)             |
    | ``<ns>:<q>.XQ``      | zset | ids of dead letters, scored by when (unix ms)       |
    | ``<ns>:<q>.XQ.msgs`` | hash | id -> encoded dead message                          |
    | ``<ns>:__acks__.<broker id>.<q>`` | set | ids a worker process holds unacknowledged |
    | ``<ns>:__heartbeats__`` | zset | broker ids, by their last command (unix ms)      |
    """

    namespace: str
    queue: str

    @property
    def waiting(self) -> str:
        """List of the ids of the queue's waiting messages, oldest first."""
        return f"{self.namespace}:{self.queue}"

    @property
    def messages(self) -> str:
        """Hash of the queue's messages, waiting or running: id -> encoded message."""
        return f"{self.namespace}:{self.queue}.msgs"

    @property
    def delayed_messages(self) -> str:
        """Hash of the queue's delayed messages (retries waiting for their backoff)."""
        return f"{self.namespace}:{self.queue}.DQ.msgs"

    @property
    def dead(self) -> str:
        """Sorted set of the queue's dead letters, by when they died (unix ms)."""
        return f"{self.namespace}:{self.queue}{DRAMATIQ_DEAD_SUFFIX}"

    @property
    def dead_messages(self) -> str:
        """Hash of the queue's dead letters: id -> encoded message."""
        return f"{self.namespace}:{self.queue}.XQ.msgs"

    def acks(self, broker_id: str) -> str:
        """Set of the ids a broker (worker process) holds unacknowledged; ``*``: any broker's."""
        return f"{self.namespace}:__acks__.{broker_id}.{self.queue}"


def dramatiq_heartbeats(namespace: str) -> str:
    """Dramatiq's sorted set of broker ids by their last command (unix ms)."""
    return f"{namespace}:__heartbeats__"
