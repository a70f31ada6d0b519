"""Every Redis key revisit writes, in one place.

All keys of one visit type share the hash tag ``{<visit_type>}`` so that, on a
Redis Cluster, a visit type's pools live on one slot and the Lua scripts that
move origins between them stay atomic. A visit type split into N shards
(``REVISIT_MIRROR_SHARDS``) has N such key sets: shard 0 keeps ``{<vt>}``,
shard k > 0 uses ``{<vt>#k}``, and origin ``id`` lives in shard ``id mod N``
(``shard_of``), so the shards spread over the cluster's masters.

| key                        | type | member   | score / value                             |
|----------------------------|------|----------|-------------------------------------------|
| ``<ns>:{<vt>}:pool:<pool>`` | zset | stats id | the pool's order (see app.domain.placement) |
| ``<ns>:{<vt>}:inflight``   | zset | stats id | when scheduled (unix s)                   |
| ``<ns>:{<vt>}:cooling``    | zset | stats id | when it may be visited again (unix s)     |
| ``<ns>:{<vt>}:parked``     | hash | stats id | ``<pool index>|<score>`` to return to     |
| ``<ns>:{<vt>}:meta``       | hash | field    | ``rebuilt_at`` and other bookkeeping (*)  |
| ``<ns>:{<vt>}:version:<g>:<b>`` | hash | id mod 256 | stats row version of its place (***) |
| ``<ns>:{<vt>}:lateness``   | list | seconds  | lateness of the latest planned picks      |
| ``<ns>:{<vt>}:rebuild:*``  |      |          | a rebuild's staging copy of the keys above (**) |

(**) Renamed over the live keys when the rebuild ends. ``rebuild:meta`` is a
string while the rebuild runs, ``<phase> <host>:<pid>:<token>``, and one
rebuild at a time holds it: phase ``bulk`` while it writes the staging keys
(placements meanwhile only add their origin to the set ``rebuild:touched``),
then ``direct`` (placements are applied to the staging keys too).

(***) One small hash per bucket ``b`` of 256 stats ids (``id div 256``), which
Redis keeps in its compact listpack encoding (``hash-max-listpack-entries``,
default 512): about 5 bytes an origin.
``g``, the generation, is the end of the token of the rebuild that built the
mirror (the meta's ``versions``; ``0`` before any): a rebuild writes its own
generation beside the live one, its swap makes it the live one, and the
rebuild then deletes the older generations' buckets.

(*) ``rate:<pool>``: pick rates behind ETAs; ``credit:<i>``: the share pool i
is owed by past batches (pop.lua); ``picks:<pool>``, ``picks_since`` and ``picks_first``: the
picks counted for the age-optimal allocation's capacity (app.services.allocation);
``replan_after`` and
``replan_multiplier``: the stats id where the re-planning sweep goes on and
the multiplier it plans with (app.services.replan); ``rebuilt_at``,
``origins``, ``shards`` and ``versions`` are written by a rebuild's swap
(a meta without ``versions``, from before the version buckets, counts as not
built: the scheduler rebuilds the mirror).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.placement import POOLS

#: Stats ids per version bucket (place.lua's BUCKET): at most that many fields,
#: under Redis's default ``hash-max-listpack-entries`` (512).
VERSION_BUCKET = 256


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

    def pool(self, name: str) -> str:
        """Sorted set of the origins ready to be picked by one policy's pool."""
        if name not in POOLS:
            raise ValueError(f"unknown pool {name!r} (known: {', '.join(POOLS)})")
        return f"{self.tag}pool:{name}"

    @property
    def inflight(self) -> str:
        """Sorted set of the origins sent to a worker, by when they were sent."""
        return f"{self.tag}inflight"

    @property
    def cooling(self) -> str:
        """Sorted set of the origins resting after a visit, by when they may return."""
        return f"{self.tag}cooling"

    @property
    def parked(self) -> str:
        """Hash of the next visit target of each origin in flight or cooling."""
        return f"{self.tag}parked"

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
        """The keys that hold origins (all but ``meta``), in Lua script order:
        the four pools (in ``POOLS`` order, the scripts' pool index), inflight,
        cooling, parked."""
        return [*map(self.pool, POOLS), self.inflight, self.cooling, self.parked]

    def staging(self) -> VisitTypeKeys:
        """Keys of a rebuild in progress, renamed over the live ones when done."""
        return VisitTypeKeys(self.namespace, self.visit_type, "rebuild:", self.shard)


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
