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
  renewed while the visit runs (one thread per worker process renews every
  claim the process holds, in one round trip). A visit that finds another visit's claim is
  not run and publishes nothing: a recurrent one is dropped (the running
  visit's statuses place the origin back), a request's waits (Dramatiq
  retries it with backoff, within its deadline) so the request is not lost.
  A visit that finds an earlier delivery of its own message holding the
  claim (its worker killed, the message given back by Dramatiq) waits for it
  too. A wait is counted apart (``count_wait``): it does not use up the
  retries of the visit's transient failures.

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
import time
from types import TracebackType
from typing import Any
from uuid import uuid4

import dramatiq
from dramatiq.middleware import Interrupt

from actors import watch
from queues import dramatiq_broker
from queues.errors import Pipeline, Redis, RedisError
from queues.lease import holder_name
from queues.visiting import hold, hold_on, holder, release, release_on

log = logging.getLogger("revisit.worker")

#: Renewals of a claim per ``claim_ttl_ms``: one or two may fail (Redis busy).
RENEWALS_PER_TTL = 3


def claim_ttl_ms() -> int:
    """How long a claim outlives its last renewal: half Dramatiq's heartbeat
    timeout, so that a killed worker's claim has expired when Dramatiq gives
    its messages to other workers."""
    return max(1, dramatiq_broker.HEARTBEAT_TIMEOUT_MS // 2)


def renewal_period_s() -> float:
    """How often a held claim is renewed."""
    return claim_ttl_ms() / 1000 / RENEWALS_PER_TTL


class OriginBusy(dramatiq.Retry):
    """Another visit of the origin is running: this one (a request's, or a
    message given back after its worker died) waits, retried by Dramatiq."""


#: The message option that counts a visit's waits for its busy origin or hoster.
WAITS_OPTION = "waits"


def count_wait(message: Any) -> None:
    """Count one more wait of a visit's ``message`` (None: sent directly, no
    message) for its busy origin or hoster: Dramatiq counts it among its
    retries, which are meant to bound its transient failures."""
    if message is not None:
        message.options[WAITS_OPTION] = message.options.get(WAITS_OPTION, 0) + 1


def failures_retried(options: dict[str, Any]) -> int:
    """How many times a visit's message (its ``options``) was retried after a
    transient failure: its retries less its waits."""
    return int(options.get("retries", 0)) - int(options.get(WAITS_OPTION, 0))


class ClaimLost(Interrupt):
    """Raised in a visit's thread: another visit of its origin took the claim
    (this visit's worker was paused past it) and runs."""


class OriginClaim:
    """The claim of one origin by one run of a visit message: ``take`` it, then
    within the block it is renewed (``watch.WATCHER``), and released at the end."""

    def __init__(
        self, client: Redis, namespace: str, visit_type: str, url: str, message_id: str
    ) -> None:
        self.client = client
        self.message_id = message_id
        #: What the claim holds: the message, and who runs it (one value per run).
        self.value = f"{message_id} {holder_name()}:{uuid4().hex[:8]}"
        #: What ``queues.visiting`` takes to renew it: namespace, visit type, URL, value.
        self.where = (namespace, visit_type, url, self.value)
        #: Interrupts the visit once another visit took the claim.
        self.watch = watch.Tripwire(ClaimLost)
        #: When (monotonic clock) Redis last confirmed this run holds the claim,
        #: as the request that confirmed it left: it holds it ``claim_ttl_ms`` on.
        self.confirmed_at = 0.0
        self._held = False

    def take(self) -> str | None:
        """Claim the origin: None once this run holds it, else the value of the
        visit holding it. Raises RedisError when Redis cannot be reached."""
        sent = time.monotonic()
        other = self._hold()
        self._held = other is None
        if self._held:
            self.confirmed_at = sent
        return other

    def held_by_earlier_run(self, other: str) -> bool:
        """Whether ``other`` (a claim's value) is an earlier delivery's of this message."""
        return other.split(" ", 1)[0] == self.message_id

    def kept(self) -> bool:
        """Whether this run still holds the claim, renewed now unless Redis confirmed
        it within a renewal period (so it holds it for two more); False if
        another visit holds it (True without Redis: the visit is not dropped for
        Redis being away; True when it runs unclaimed)."""
        if not self._held:
            return True
        if self.watch.tripped:
            return False
        sent = time.monotonic()
        if sent - self.confirmed_at < renewal_period_s():
            return True
        try:
            other = self._hold()
        except RedisError:
            return True  # Redis away: the visit is not dropped for it
        if other is not None:
            self.lose(other)
            return False
        self.confirmed_at = sent
        return True

    def ask(self, pipe: Pipeline) -> int:
        """Renew the claim unless Redis confirmed it lately, so that it is
        renewed every renewal period (``watch.Watched``)."""
        if time.monotonic() - self.confirmed_at < renewal_period_s() - watch.POLL_S:
            return 0
        hold_on(pipe, *self.where, claim_ttl_ms())
        return 1

    def hear(self, replies: list[Any], sent: float) -> bool:
        """Take the renewal's reply: the claim is renewed no more once another
        visit holds it (``watch.Watched``)."""
        other = holder(replies[0])
        if other is None:
            self.confirmed_at = sent
            return True
        self.lose(other)
        return False

    def lose(self, other: str) -> None:
        """Another visit (``other``) took the claim: interrupt this one."""
        log.warning("%s: another visit took its origin's claim (%s)", self.where[2], other)
        self.watch.trip()

    def release_on(self, pipe: Pipeline) -> None:
        """Release the claim with what else ``pipe`` sends (which the caller
        executes); one that fails expires by itself."""
        if self._held:
            watch.WATCHER.remove(self)
            release_on(pipe, *self.where)
            self._held = False

    def _hold(self) -> str | None:
        return hold(self.client, *self.where, claim_ttl_ms())

    def __enter__(self) -> OriginClaim:
        if self._held:
            watch.WATCHER.add(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._held:
            return
        watch.WATCHER.remove(self)
        try:
            release(self.client, *self.where)
        except RedisError as error:
            log.warning("%s: could not release its origin's claim (%s)", self.where[2], error)
