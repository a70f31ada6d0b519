"""Per-visit-type scheduler leases in Redis, with fencing tokens.

Several scheduler processes may run (one per host, say, for availability);
each visit type is fed by one of them at a time: the holder of its lease.
A lease lasts ``ttl_s`` unless renewed, so when its holder dies another
process takes the visit type over within ``ttl_s`` plus one poll interval.

Why a lease rather than splitting the work: the bound that must hold is
per queue (``max_queue_length`` minus what is queued), and two processes
filling one queue at once both see the same free slots. A lease makes the
read of the depth, the pop and the send one process's act. The fencing
token closes the gap a stalled holder leaves: its pops carry its token,
and ``fence.lua`` refuses them once another process holds a newer one.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import redis

from queues import lua
from queues.keys import scheduler_lease, scheduler_lease_tokens


class LeaseLost(Exception):
    """A fenced pop was refused: another process holds the visit type's lease."""


def holder_name() -> str:
    """Who holds a lease, as operators see it in Redis: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Leases:
    """The leases one scheduler process holds, one per visit type."""

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        namespace: str,
        ttl_s: float,
        holder: str,
        shards: Mapping[str, int] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.holder = holder
        self.shards = dict(shards or {})
        self.tokens: dict[str, str] = {}
        self._take = client.register_script(lua("lease"))

    def hold(self, visit_type: str) -> str | None:
        """Take or renew the lease of ``visit_type``; its fencing token, or None
        while another process holds it."""
        token = self._call(visit_type, self.ttl_ms)
        if not token:
            self.tokens.pop(visit_type, None)
            return None
        self.tokens[visit_type] = token.decode() if isinstance(token, bytes) else str(token)
        self._copy_to_shards(visit_type)
        return self.tokens[visit_type]

    def _copy_to_shards(self, visit_type: str) -> None:
        """Copy the lease into the slot of every other shard, for fence.lua there.

        A copy expires a tenth of the TTL before the lease it copies (it is
        written after it), so a stalled holder's copy never outlives its lease.
        """
        shards = self.shards.get(visit_type, 1)
        if shards <= 1:
            return
        value = f"{self.tokens[visit_type]}|{self.holder}"
        pipe = self.client.pipeline(transaction=False)
        for shard in range(1, shards):
            key = scheduler_lease(self.namespace, visit_type, shard)
            pipe.set(key, value, px=max(1, self.ttl_ms * 9 // 10))
        pipe.execute()

    def release_all(self) -> None:
        """Give back every lease held (on a clean stop), so another process takes
        over at once instead of after the TTL."""
        for visit_type in list(self.tokens):
            self._call(visit_type, "release")
            del self.tokens[visit_type]

    def _call(self, visit_type: str, ttl_ms: int | str) -> object:
        keys = [
            scheduler_lease(self.namespace, visit_type),
            scheduler_lease_tokens(self.namespace, visit_type),
        ]
        mine = self.tokens.get(visit_type, "")
        return self._take(keys=keys, args=[self.holder, mine, ttl_ms])

    def holder_of(self, visit_type: str) -> str | None:
        """Who holds the lease of ``visit_type`` now (None: nobody)."""
        value = self.client.get(scheduler_lease(self.namespace, visit_type))
        if value is None:
            return None
        text = value.decode() if isinstance(value, bytes) else str(value)
        return text.partition("|")[2]
