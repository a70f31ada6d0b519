"""The worker module: ``dramatiq actors.worker --queues visit.git.express ...``.

Declares the lanes of every configured visit type (express, slow, priority,
and the first-visits queues of the configured prefixes) and the ``visit``
actor, which runs the visit type's loader and publishes ``created`` then the
final status to the journal. The journal client, not the worker, updates the
schedule: a visit whose status never reaches the journal is returned by the
scheduler after its cooldown.

Lanes (seed 003): a visit that outlasts the express lane's time limit is
stopped and re-sent, marked, to the head of the slow lane (the middleware
``actors.escalation``); one that outlasts the slow lane's limit fails for
good. Hoster limits are the middleware ``actors.hoster_limits``. A transient
failure (network trouble) is retried with backoff a bounded number of times,
then reported failed.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from functools import cache, lru_cache
from typing import Any
from uuid import uuid4

import dramatiq
import psycopg
from dramatiq.middleware import CurrentMessage, TimeLimitExceeded

from actors.abort import VisitAborted, abort_watch
from actors.broker import context, make_broker
from actors.escalation import ExpressEscalation, mark_outlasted_express
from actors.hoster_limits import HosterBusy, HosterLimits
from actors.registry import WorkerRegistry
from actors.visiting import ClaimLost, OriginBusy, OriginClaim, count_wait, failures_retried
from app.db.connection import connect
from app.domain.cooldown import finish_by_s, request_window_s, start_within_s, superseded
from app.domain.lanes import MAX_TIME_LIMIT_S, Lane
from app.domain.queue_names import lane_queue
from app.kafka.client import PUBLISH_TIMEOUT_S, PublishError, StatusPublisher
from app.loaders.archive import stop_children
from app.loaders.base import Loader, UnknownLoader, VisitResult, checked_result, get_loader
from app.services.context import redis_client
from app.services.requests import end_unvisited_request, release_request_origin
from app.settings import WORKER_LOADERS_VARIABLE, WORKER_QUEUES_VARIABLE, get_settings
from monitoring.metrics import ORIGIN_BUSY, VISIT_SECONDS, VISITS, VISITS_DROPPED
from queues.errors import RedisError
from queues.workers import record_visit, take_abort

#: Retries and first retry delay of a message sent without its visit type's.
DEFAULT_RETRIES = 3
DEFAULT_RETRY_DELAY_S = 30.0
#: The final status's publish gives up this long before the visit's time limit
#: (which would interrupt it and lose the status) and hands it to ``publish_status``.
PUBLISH_MARGIN_S = 2.0

log = logging.getLogger("revisit.worker")

settings = get_settings()
broker = make_broker(settings)
broker.add_middleware(CurrentMessage())
broker.add_middleware(WorkerRegistry(redis_client(settings), settings.redis_namespace))
broker.add_middleware(
    HosterLimits(redis_client(settings), settings.redis_namespace, settings.hoster_limits)
)
broker.add_middleware(ExpressEscalation())


class StopLoaderChildren(dramatiq.Middleware):
    """At worker shutdown, kill the archive's loaders' running visits (their
    process groups): one would otherwise hold the shutdown up to its lane's time
    limit. Each ends failed (closed failed in the archive if it recorded it)."""

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        stop_children()


broker.add_middleware(StopLoaderChildren())
# The queues ``revisit worker`` chose from the visit_types table (Dramatiq
# consumes declared queues only); none when imported elsewhere.
QUEUES: list[str] = json.loads(os.environ.get(WORKER_QUEUES_VARIABLE, "[]"))
for _queue in QUEUES:
    broker.declare_queue(_queue)
# The loader of each visit type served (the table's ``loader``); by default the
# one named like the visit type.
LOADERS: dict[str, str] = json.loads(os.environ.get(WORKER_LOADERS_VARIABLE, "{}"))


# Derives from dramatiq.Retry (as HosterBusy does): Dramatiq then logs one INFO
# line per retry instead of a traceback at ERROR, and Retries backs off as for
# any exception.
class TransientVisitError(dramatiq.Retry):
    """A visit failed for a reason worth retrying soon (Dramatiq's Retries does)."""


@lru_cache(maxsize=1)
def publisher() -> StatusPublisher:
    """One journal producer per worker process."""
    return StatusPublisher(get_settings())


@cache
def loader_for(visit_type: str) -> Loader:
    """The loader of a visit type, loaded once."""
    return get_loader(visit_type, LOADERS.get(visit_type))


def _aborted(request_id: int) -> bool:
    return take_abort(context().redis, get_settings().redis_namespace, request_id)


def _end_unvisited(request_id: int, reason: str | None) -> None:
    """End a request's visit that publishes no final status: its origin leaves
    flight, and a request whose visit never reached the archive (``reason``) fails,
    as no journal status will end it (the archive has no visit to number); an
    aborted one (no reason) has ended already."""
    now = datetime.now(tz=UTC)
    try:
        with connect(get_settings()) as conn:
            if reason is None:
                release_request_origin(conn, context(), request_id, now)
            else:
                end_unvisited_request(conn, context(), request_id, reason, now)
    except (psycopg.Error, RedisError) as exc:
        # The origin then returns once the scheduled cooldown presumes its visit lost.
        log.warning("request %d: could not record that it ended (%s)", request_id, exc)


def _publish_final(
    queue: str,
    url: str,
    visit_type: str,
    visit: int,
    status: str,
    snapshot: bytes | None,
    metadata: dict[str, Any],
    timeout_s: float,
) -> None:
    """Publish a visit's final status within what is left of its time limit; one the
    broker has not acknowledged by then is sent, in the visit's queue, to
    ``publish_status``, which retries it with backoff past that limit."""
    date = datetime.now(tz=UTC)
    try:
        publisher().publish(
            url, visit_type, visit, status, snapshot, metadata, date, max(0.0, timeout_s)
        )
    except PublishError as exc:
        log.warning(
            "visit %d of %s: status %s not yet published (%s); retrying apart",
            visit,
            url,
            status,
            exc,
        )
        # Keyword arguments, as a visit's: the dead-letter listing and metrics read them.
        later = publish_status.message_with_options(
            kwargs={
                "url": url,
                "visit_type": visit_type,
                "visit": visit,
                "status": status,
                "snapshot_hex": snapshot.hex() if snapshot else None,
                "metadata": metadata,
                "date": date.isoformat(),
            }
        )
        broker.enqueue(later.copy(queue_name=queue))


@dramatiq.actor(
    actor_name="publish_status",
    queue_name=QUEUES[0] if QUEUES else lane_queue("git", "express"),  # sent to a visit's queue
    time_limit=int((PUBLISH_TIMEOUT_S + 60) * 1000),
    max_retries=DEFAULT_RETRIES * 4,
    min_backoff=int(DEFAULT_RETRY_DELAY_S * 1000),
    max_backoff=int(DEFAULT_RETRY_DELAY_S * 1000 * 2**DEFAULT_RETRIES),
)
def publish_status(
    url: str,
    visit_type: str,
    visit: int,
    status: str,
    snapshot_hex: str | None,
    metadata: dict[str, Any],
    date: str,
) -> None:
    """Publish a visit's final status that its visit could not publish within its
    time limit (the broker away); Dramatiq retries it while the broker stays away."""
    snapshot = bytes.fromhex(snapshot_hex) if snapshot_hex else None
    when = datetime.fromisoformat(date)
    publisher().publish(url, visit_type, visit, status, snapshot, metadata, when)
    log.info("visit %d of %s: status %s published late", visit, url, status)


def _record_outcome(queue: str, visit_type: str, result: VisitResult, claim: OriginClaim) -> None:
    """Count a finished visit (its duration, outcome and metrics) and release its
    origin's claim, in one round trip. Its status is already published: a failure
    here (Redis restarting) must not make Dramatiq run the visit again, so it is
    logged in one line and the visit ends (the claim expires by itself)."""
    try:
        pipe = context().redis.pipeline(transaction=False)
        record_visit(
            pipe, settings.redis_namespace, queue, visit_type, result.status, result.duration_s
        )
        claim.release_on(pipe)
        pipe.execute()
        VISITS.labels(visit_type, result.status).inc()
        VISIT_SECONDS.labels(visit_type).observe(result.duration_s)
    except Exception as exc:  # nothing after the publish may retry the visit
        log.warning("visit of a %s origin: could not record its outcome (%s)", visit_type, exc)


def _retry_transient(retries: int, exception: BaseException) -> bool:
    # Transient failures are bounded by the actor itself (its visit type's num_retries,
    # waits left out: ``failures_retried``); a busy hoster, or origin, is waited for with
    # the same backoff, as long as it takes (a visit waits no longer than its window:
    # past it, it is dropped).
    return isinstance(exception, TransientVisitError | HosterBusy | OriginBusy)


#: After the mirror's Redis failed to answer, visits are not checked against it
#: for this long (s): a worker host may not reach it, and each visit would wait.
MIRROR_RETRY_S = 60.0
_mirror_away_until = 0.0


def _superseded(origin_id: int, visit_type: str, scheduled_at: float) -> bool:
    """Whether the mirror has the origin of a recurrent visit sent at ``scheduled_at``
    in flight from a later send, or cooling down (a visit of it sent since has
    ended: this one would be wasted, and break the cooldown); unknown, so False,
    without the mirror."""
    global _mirror_away_until
    if origin_id <= 0 or time.monotonic() < _mirror_away_until:
        return False  # a request's visit (its origin may have no stats row), or no mirror
    try:
        flight = context().mirror.flight(visit_type, origin_id)
    except RedisError as exc:
        _mirror_away_until = time.monotonic() + MIRROR_RETRY_S
        log.warning(
            "mirror unreadable: visits not checked for a later send for %gs (%s)",
            MIRROR_RETRY_S,
            exc,
        )
        return False
    return flight.cooling or superseded(flight.sent_at, scheduled_at)


def _claim(
    visit_type: str, url: str, visit: int, request_id: int | None, message: Any
) -> OriginClaim | None:
    """The claim of the visit's origin, taken (untaken without Redis: the visit runs
    unclaimed); None when the visit is dropped, another visit of its origin
    running. A request's visit, or one whose message an earlier delivery still
    holds the claim for, raises OriginBusy instead: Dramatiq retries it."""
    message_id = message.message_id if message is not None else str(uuid4())
    claim = OriginClaim(context().redis, settings.redis_namespace, visit_type, url, message_id)
    try:
        other = claim.take()
    except RedisError as exc:
        log.warning("visit %d of %s: origin not claimed, Redis away (%s)", visit, url, exc)
        return claim
    if other is None:
        return claim
    if request_id is not None or claim.held_by_earlier_run(other):
        count_wait(message)
        ORIGIN_BUSY.labels(visit_type).inc()
        log.info("visit %d of %s: another visit of it runs (%s); waiting", visit, url, other)
        raise OriginBusy(f"another visit of {url} runs")
    VISITS_DROPPED.labels(visit_type, "origin_busy").inc()
    log.info("visit %d of %s: another visit of it runs (%s); dropped", visit, url, other)
    return None


@dramatiq.actor(
    actor_name="visit",
    queue_name=QUEUES[0] if QUEUES else lane_queue("git", "express"),  # sends name a queue
    time_limit=int(MAX_TIME_LIMIT_S * 1000),
    retry_when=_retry_transient,
    min_backoff=int(DEFAULT_RETRY_DELAY_S * 1000),
    max_backoff=int(DEFAULT_RETRY_DELAY_S * 1000 * 2**DEFAULT_RETRIES),
)
def visit(
    origin_id: int,
    url: str,
    visit_type: str,
    arguments: dict[str, Any],
    visit: int,
    scheduled_at: float,
    request_id: int | None = None,
    lane: Lane = "express",
) -> None:
    """Visit one origin and publish its statuses (created, then final) to the journal,
    unless its loader's storage publishes them (the archive's loaders)."""
    began = time.monotonic()
    if request_id is not None and _aborted(request_id):
        log.info("request %d was cancelled; not visiting %s", request_id, url)
        _end_unvisited(request_id, None)
        return
    message = CurrentMessage.get_current_message()
    options = message.options if message is not None else {}
    default_limit_s = settings.express_time_limit_s if lane == "express" else MAX_TIME_LIMIT_S
    limit_s = options.get("time_limit", default_limit_s * 1000) / 1000
    # A visit must start, and its created status be taken, before the scheduler
    # presumes it lost and sends the origin again: a recurrent visit within the
    # scheduled cooldown, a request's within its window (its deadline).
    if request_id is None:
        window_s, window = context().cooldowns.scheduled.total_seconds(), "the scheduled cooldown"
    else:
        window_s, window = request_window_s(limit_s), f"the deadline of request {request_id}"
    start_within = start_within_s(scheduled_at, time.time(), window_s)
    if start_within <= 0:
        VISITS_DROPPED.labels(visit_type, "late").inc()
        log.info("visit %d of %s waited past %s; not visiting", visit, url, window)
        return
    if request_id is None and _superseded(origin_id, visit_type, scheduled_at):
        # The visit sent since places the origin back; this one would overlap it.
        VISITS_DROPPED.labels(visit_type, "superseded").inc()
        log.info("visit %d of %s: its origin was sent again since; dropped", visit, url)
        return
    claim = _claim(visit_type, url, visit, request_id, message)
    if claim is None:
        return
    with claim:
        # The loader stops at finish_by too: its timeout runs on the monotonic
        # clock, which counts the time the worker was paused (SIGSTOP).
        finish_by = finish_by_s(scheduled_at, window_s)
        load_s = min(limit_s, finish_by - time.time())
        try:
            loader: Loader | None = loader_for(visit_type)
            problem = None
        except UnknownLoader as exc:
            # Recorded as a failed visit: the origin then cools down and its
            # request ends, instead of a dead letter no one reads.
            loader, problem = None, str(exc)
        # The archive's loaders: its storage's journal writer publishes the visit's
        # statuses, numbered by the archive; publishing them too would count it twice.
        publishes = loader is None or getattr(loader, "publishes_statuses", True)
        if publishes:
            try:
                publisher().publish(
                    url,
                    visit_type,
                    visit,
                    "created",
                    None,
                    {"lane": lane},
                    None,
                    min(start_within, PUBLISH_TIMEOUT_S),
                )
            except PublishError as exc:
                if start_within > PUBLISH_TIMEOUT_S:
                    raise  # Dramatiq retries the visit
                # The broker away until the cooldown's end: the scheduler sends the
                # origin again once it takes it back; visiting now would overlap that.
                log.warning(
                    "visit %d of %s: created not published (%s); not visiting", visit, url, exc
                )
                return
        started = time.monotonic()
        watch: AbstractContextManager[object] = nullcontext()
        if request_id is not None:  # an aborted request's visit stops
            watch = abort_watch(context().redis, settings.redis_namespace, request_id)
        try:
            # The loader's own I/O timeout is the lane's limit: Dramatiq cannot
            # interrupt a blocking call, so the loader must stop by itself.
            if loader is None:
                result = VisitResult("failed", None, 0.0, problem)
            else:
                with watch, claim.watch.interrupting():
                    loaded = loader.load(url, arguments, load_s)
                result = checked_result(loaded, time.monotonic() - started)
        except TimeLimitExceeded:
            result = VisitResult(
                "failed", None, time.monotonic() - started, "timeout", timed_out=True
            )
        except VisitAborted:
            # No final status: the visit neither fails the origin nor counts as an outcome.
            log.info("request %s was aborted; stopped visiting %s", request_id, url)
            if request_id is not None:  # stopped: nothing overlaps what is sent next
                _end_unvisited(request_id, None)
            return
        except ClaimLost:
            result = VisitResult("failed", None, time.monotonic() - started, "claim lost")
        if time.time() >= finish_by or (result.timed_out and load_s < limit_s):
            # Paused or slowed past it: the scheduler sends the origin again; a final
            # status (or an escalation, a retry) now would overlap that visit.
            VISITS_DROPPED.labels(visit_type, "outlasted").inc()
            log.warning("visit %d of %s outlasted %s; dropped", visit, url, window)
            return
        if not claim.kept():
            # Paused past its claim, which another visit of the origin took: that
            # visit's statuses place the origin; this one's would overlap them.
            VISITS_DROPPED.labels(visit_type, "claim_lost").inc()
            log.warning("visit %d of %s: another visit of it runs since; dropped", visit, url)
            return
        if result.timed_out:
            if lane == "express" and message is not None:
                mark_outlasted_express(message, result.duration_s)  # ExpressEscalation re-sends it
                return
            result = VisitResult(
                "failed", None, result.duration_s, f"{lane} lane time limit ({limit_s:g}s)"
            )
        max_retries = options.get("max_retries", DEFAULT_RETRIES)
        if result.transient and failures_retried(options) < max_retries:
            log.info("%s: transient failure (%s), retrying", url, result.error)
            raise TransientVisitError(result.error or "transient failure")
        metadata: dict[str, Any] = {"duration_s": round(result.duration_s, 3), "lane": lane}
        if result.error:
            metadata["error"] = result.error
        if options.get("timed_out_express"):
            metadata["timed_out_express"] = True
        queue = message.queue_name if message is not None else lane_queue(visit_type, lane)
        if publishes:
            left_s = limit_s - (time.monotonic() - began) - PUBLISH_MARGIN_S
            final = (url, visit_type, visit, result.status, result.snapshot, metadata)
            _publish_final(queue, *final, timeout_s=left_s)
        elif request_id is not None and not result.archived:
            _end_unvisited(request_id, result.error or f"visit ended {result.status}")
        _record_outcome(queue, visit_type, result, claim)
        log.info(
            "visited %s in the %s lane: %s in %.2fs%s",
            url,
            lane,
            result.status,
            result.duration_s,
            f" ({result.error})" if result.error else "",
        )
