"""One visit of an origin at a time, whatever the scheduler believed.

The scheduler sends an origin again when it takes its visit for lost: a
request once a recurrent visit has been in flight longer than the request's
window, any visit once a ``partial`` status ended the flight of one still
loading. A visit that was only late (its workers down, paused) could then run
beside the one sent since. So the worker, before it publishes or loads
anything:

- drops a recurrent visit whose origin was sent again since (the mirror has
  it in flight from a later send: ``superseded``); the visit in flight places
  the origin back;
- claims the origin (``queues.visiting``), one claim per visit type and URL,
  renewed while the visit runs. A visit that finds another visit's claim is
  not run and publishes nothing: a recurrent one is dropped (the running
  visit's statuses place the origin back), a request's waits (Dramatiq
  retries it with backoff, within its deadline) so the request is not lost.
  A visit that finds an earlier delivery of its own message holding the
  claim (its worker killed, the message given back by Dramatiq) waits for it
  too.

The claim expires ``claim_ttl_ms`` after its last renewal, under Dramatiq's
heartbeat timeout: a killed worker's claim is gone before Dramatiq gives its
message to another worker, and a paused worker's claim lapses as Dramatiq
takes that worker for dead. A visit whose claim another visit took meanwhile
(its worker paused, then resumed) is interrupted, or drops its final status.

Without Redis (the claim cannot be read or renewed), a visit runs as it did
before claims: the scheduler's own bookkeeping still sends an origin once at
a time, and a visit must not fail, nor wait and run twice, because Redis
was away a moment. A claim that cannot be released expires by itself.
"""

from __future__ import annotations

import logging
from types import TracebackType
from uuid import uuid4

import dramatiq
from dramatiq.middleware import Interrupt

from actors.watch import Watch
from queues import dramatiq_broker
from queues.errors import Redis, RedisError
from queues.lease import holder_name
from queues.visiting import hold, release

log = logging.getLogger("revisit.worker")

#: Renewals of a claim per ``claim_ttl_ms``: one or two may fail (Redis busy).
RENEWALS_PER_TTL = 3


def claim_ttl_ms() -> int:
    """How long a claim outlives its last renewal: half Dramatiq's heartbeat
    timeout, so that a killed worker's claim has expired when Dramatiq gives
    its messages to other workers."""
    return max(1, dramatiq_broker.HEARTBEAT_TIMEOUT_MS // 2)


class OriginBusy(dramatiq.Retry):
    """Another visit of the origin is running: this one (a request's, or a
    message given back after its worker died) waits, retried by Dramatiq."""


class ClaimLost(Interrupt):
    """Raised in a visit's thread: another visit of its origin took the claim
    (this visit's worker was paused past it) and runs."""


class OriginClaim:
    """The claim of one origin by one run of a visit message: ``take`` it, then
    within the block it is renewed, and released at the end."""

    def __init__(
        self, client: Redis, namespace: str, visit_type: str, url: str, message_id: str
    ) -> None:
        self._where = (client, namespace, visit_type, url)
        self.message_id = message_id
        #: What the claim holds: the message, and who runs it (one value per run).
        self.value = f"{message_id} {holder_name()}:{uuid4().hex[:8]}"
        self.watch = Watch(
            self._lost, claim_ttl_ms() / 1000 / RENEWALS_PER_TTL, ClaimLost, f"claim-{url}"
        )
        self._held = False

    def take(self) -> str | None:
        """Claim the origin: None once this run holds it, else the value of the
        visit holding it. Raises RedisError when Redis cannot be reached."""
        other = hold(*self._where, self.value, claim_ttl_ms())
        self._held = other is None
        return other

    def held_by_earlier_run(self, other: str) -> bool:
        """Whether ``other`` (a claim's value) is an earlier delivery's of this message."""
        return other.split(" ", 1)[0] == self.message_id

    def kept(self) -> bool:
        """Renew the claim now; False if another visit holds it (True without Redis:
        the visit is not dropped for Redis being away; True when it runs unclaimed)."""
        if not self._held:
            return True
        return not self.watch.tripped and not self._lost()

    def _lost(self) -> bool:
        try:
            other = hold(*self._where, self.value, claim_ttl_ms())
        except RedisError:
            return False  # Redis away: the next renewal retries
        if other is not None:
            log.warning("%s: another visit took its origin's claim (%s)", self._where[3], other)
        return other is not None

    def __enter__(self) -> OriginClaim:
        if self._held:
            self.watch.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._held:
            return
        # The renewal under way ends first: it would take the claim again.
        self.watch.stop(wait=True)
        try:
            release(*self._where, self.value)
        except RedisError as error:
            log.warning("%s: could not release its origin's claim (%s)", self._where[3], error)
