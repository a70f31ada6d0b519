"""No two visits of one origin run at once, whatever the scheduler believed: a
visit late in its queue meets the one sent since, on real PostgreSQL, Redis,
Kafka-protocol broker and Dramatiq worker processes (``actors.visiting``)."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from actors.broker import make_broker
from actors.visiting import OriginClaim
from actors.watch import Watcher
from app.db.connection import DictConnection
from app.domain.lanes import Lane
from app.domain.placement import epoch_s
from app.domain.queue_names import lane_queue
from app.inputs.api import RequestVisit
from app.kafka.client import topic_partitions
from app.kafka.codec import decode_event
from app.services.context import Context
from app.services.requests import create_request, get_request, take_pending
from app.services.scheduling import VisitOrder
from app.settings import Settings
from queues.dramatiq_broker import enqueue_many, visit_message
from queues.keys import visiting
from queues.visiting import hold, release
from queues.workers import hoster_limiter
from tests.integration.helpers import list_origins, stats_by_url
from tests.processes import running, wait_for, with_constants

VISIT_TYPE = "simulated"
URL = "sim://overlap"
ENV = {"REVISIT_WORKER_VISIT_TYPES_ALLOW": f'["{VISIT_TYPE}"]'}
#: Dramatiq gives a dead worker's messages back after its heartbeat timeout
#: (a claim lives half as long), at a maintenance pass: both short and certain.
FAST = with_constants(
    {
        "queues.dramatiq_broker.HEARTBEAT_TIMEOUT_MS": 2000,
        "queues.dramatiq_broker.MAINTENANCE_CHANCE": 1_000_000,
    },
    ENV,
)
WORKER = ["revisit", "worker", "--lane", "all", "--processes", "1", "--threads", "2"]


@dataclass(frozen=True)
class QuickRetries:
    """A visit type's tuning whose retries come after a second or two."""

    visit_time_limit_s: float = 60.0
    max_retries: int = 1
    retry_delay_s: float = 1.0


class Origin:
    """The test's origin of the 'simulated' visit type, and how to send its visits."""

    def __init__(
        self, settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
    ) -> None:
        conn.execute(
            "insert into visit_types (name, max_queue_length) values (%s, 5)", (VISIT_TYPE,)
        )
        list_origins(conn, ctx, [URL], visit_type=VISIT_TYPE)
        self.id = int(str(stats_by_url(conn)[URL]["id"]))
        self.conn = conn
        self.broker = make_broker(settings)
        self.claim = visiting(settings.redis_namespace, VISIT_TYPE, URL)
        self.redis = redis.Redis.from_url(settings.broker_redis_dsn())
        #: The folder of the logs of the processes the test starts.
        self.logs = tmp_path / "logs"
        self.logs.mkdir()

    def send(
        self,
        visit: int,
        duration_s: float,
        sent_at: float,
        request_id: int | None = None,
        transient_failures: int = 0,
    ) -> None:
        """Send visit number ``visit`` of the origin, as sent at ``sent_at``: a
        request's (to the priority lane) or a recurrent one (express), whose
        first ``transient_failures`` attempts fail transiently."""
        lane: Lane = "express" if request_id is None else "priority"
        origin_id = 0 if request_id is not None else self.id
        args = {"duration_s": duration_s, "transient_failures": transient_failures}
        order = VisitOrder(origin_id, URL, VISIT_TYPE, args, visit, sent_at, request_id=request_id)
        queue = lane_queue(VISIT_TYPE, lane)
        self.broker.declare_queue(queue)
        enqueue_many(self.broker, [visit_message(queue, order, lane, 60.0, QuickRetries())])

    def stats(self) -> dict[str, object]:
        return stats_by_url(self.conn)[URL]


def published(settings: Settings) -> list[tuple[int, str, datetime]]:
    """Every status of the journal topic: visit number, status, date, in date order."""
    partitions = topic_partitions(settings, settings.journal_topic) or 1
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_brokers,
            "group.id": "overlap-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign(
        [TopicPartition(settings.journal_topic, p, OFFSET_BEGINNING) for p in range(partitions)]
    )
    found = []
    while messages := consumer.consume(100, 2.0):
        for message in messages:
            if not message.error():
                event = decode_event(message.value())
                found.append((event.visit, event.status, event.date))
    consumer.close()
    return sorted(found, key=lambda status: status[2])


def test_a_claim_is_held_by_one_run_at_a_time_and_released_by_its_holder_only(
    settings: Settings,
) -> None:
    client = redis.Redis.from_url(settings.broker_redis_dsn())
    where = (client, settings.redis_namespace, VISIT_TYPE, URL)

    assert hold(*where, "m1 run-a", 10_000) is None
    assert hold(*where, "m2 run-b", 10_000) == "m1 run-a"
    assert release(*where, "m2 run-b") == "m1 run-a"
    assert hold(*where, "m1 run-a", 10_000) is None  # renewed by its holder
    assert release(*where, "m1 run-a") is None
    assert hold(*where, "m2 run-b", 50) is None
    time.sleep(0.2)  # expired
    assert hold(*where, "m1 run-a", 10_000) is None


def test_a_worker_process_keeps_the_claims_of_its_visits_from_one_thread_until_one_is_taken(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queues.dramatiq_broker.HEARTBEAT_TIMEOUT_MS", 600)  # claims of 300 ms
    # A watching thread an earlier test started sleeps the default period: this
    # process's claims are renewed by a thread of their own, at a short one.
    monkeypatch.setattr("actors.watch.WATCHER", Watcher())
    monkeypatch.setattr("actors.watch.POLL_S", 0.05)
    client = redis.Redis.from_url(settings.broker_redis_dsn())
    urls = [f"sim://kept/{i}" for i in range(3)]
    keys = [visiting(settings.redis_namespace, VISIT_TYPE, url) for url in urls]
    claims = [
        OriginClaim(client, settings.redis_namespace, VISIT_TYPE, url, f"m{i}")
        for i, url in enumerate(urls)
    ]
    assert all(claim.take() is None for claim in claims)
    threads = threading.active_count()
    for claim in claims:
        claim.__enter__()
    assert threading.active_count() <= threads + 1  # one renewing thread at most
    time.sleep(1.0)  # past three times the claims' lifetime
    assert [client.get(key) for key in keys] == [claim.value.encode() for claim in claims]
    client.set(keys[0], "m9 another-run")  # another visit took the first origin
    wait_for(lambda: claims[0].watch.tripped, 5, "the claim's loss")
    assert not claims[0].kept()
    assert [claim.kept() for claim in claims[1:]] == [True, True]
    for claim in claims:
        claim.__exit__(None, None, None)
    assert [client.get(key) for key in keys] == [b"m9 another-run", None, None]


@pytest.mark.every_mirror(sharded=True)
def test_the_mirror_tells_when_an_origin_in_flight_was_sent_in_whichever_shard(
    conn: DictConnection, ctx: Context
) -> None:
    urls = [f"https://sent.example/{i}" for i in range(6)]
    list_origins(conn, ctx, urls)
    ids = {url: int(str(row["id"])) for url, row in stats_by_url(conn).items()}
    now = datetime.now(tz=UTC)
    for url in urls[:3]:
        create_request(conn, RequestVisit(url=url, visit_type="git"), now=now)
    assert len(take_pending(conn, ctx, "git", 3, now, visit=1)) == 3

    sent = {url: ctx.mirror.flight("git", ids[url]).sent_at for url in urls}

    assert sent == {url: epoch_s(now) if url in urls[:3] else None for url in urls}


@pytest.mark.every_mirror
@pytest.mark.parametrize("ended", [False, True], ids=["running", "ended"])
def test_a_delayed_recurrent_visit_arriving_while_or_after_the_requests_visit_runs_does_not_run(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path, ended: bool
) -> None:
    origin = Origin(settings, conn, ctx, tmp_path)
    logs = origin.logs
    now = datetime.now(tz=UTC)
    request_id = create_request(conn, RequestVisit(url=URL, visit_type=VISIT_TYPE), now=now)
    # The scheduler took the recurrent visit sent an hour ago for lost (the
    # request's window passed) and sent the request: the origin is in flight.
    [taken] = take_pending(conn, ctx, VISIT_TYPE, 1, now, visit=11, time_limit_s=60.0)
    assert taken.id == request_id
    origin.send(11, 0.5 if ended else 6.0, epoch_s(now), request_id)
    dropped = "visit 10 of sim://overlap: its origin was sent again since; dropped"
    with running({"worker": WORKER, "journal": ["revisit", "journal"]}, ENV, logs):
        if ended:  # the mirror has the origin cooling down: the late visit would break that
            wait_for(
                lambda: ctx.mirror.locate(VISIT_TYPE, origin.id).where == "cooling",
                60,
                "the request's visit to end",
                logs,
            )
        else:  # the mirror has the origin in flight from the request's send
            wait_for(
                lambda: origin.stats()["last_visit"] is not None, 60, "the request's visit", logs
            )
        origin.send(10, 0.5, epoch_s(now) - 3600)  # its workers were down
        wait_for(
            lambda: get_request(conn, request_id)["status"] == "succeeded",
            60,
            "the request's visit to end",
            logs,
        )
        wait_for(
            lambda: (
                dropped in (logs / "worker.log").read_text()
                or any(visit == 10 for visit, _, _ in published(settings))
            ),
            60,
            "the late visit",
            logs,
        )
        time.sleep(1.0)  # what the late visit would publish
    assert [(visit, status) for visit, status, _ in published(settings)] == [
        (11, "created"),
        (11, "full"),
    ]
    assert dropped in (logs / "worker.log").read_text()


def test_a_recurrent_visit_arriving_while_another_visit_of_its_origin_runs_is_dropped(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    origin = Origin(settings, conn, ctx, tmp_path)
    logs = origin.logs
    now = time.time()
    origin.send(20, 6.0, now - 60)
    with running({"worker": WORKER, "journal": ["revisit", "journal"]}, ENV, logs):
        wait_for(lambda: origin.stats()["last_visit"] is not None, 60, "the first visit", logs)
        # Sent later (after a partial status ended the first one's flight, say):
        # the mirror does not have it in flight, the running visit's claim tells.
        origin.send(21, 0.5, now)
        wait_for(lambda: origin.stats()["last_visit_status"] == "full", 60, "the first visit", logs)
        time.sleep(1.5)  # what the second visit would publish
    assert [(visit, status) for visit, status, _ in published(settings)] == [
        (20, "created"),
        (20, "full"),
    ]
    assert (
        "visit 21 of sim://overlap: another visit of it runs" in (logs / "worker.log").read_text()
    )


def test_a_requests_visit_arriving_while_another_visit_of_its_origin_runs_waits_for_its_end(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    origin = Origin(settings, conn, ctx, tmp_path)
    logs = origin.logs
    now = time.time()
    origin.send(30, 5.0, now)
    with running({"worker": WORKER, "journal": ["revisit", "journal"]}, ENV, logs):
        wait_for(lambda: origin.stats()["last_visit"] is not None, 60, "the recurrent visit", logs)
        origin.send(31, 0.5, time.time(), request_id=41)
        wait_for(lambda: origin.stats()["last_visit_number"] == 31, 60, "the request's visit", logs)
        # Released as it ended, long before it would expire.
        wait_for(lambda: not origin.redis.exists(origin.claim), 3, "the claim's release", logs)
    statuses = [(visit, status) for visit, status, _ in published(settings)]
    assert statuses == [(30, "created"), (30, "full"), (31, "created"), (31, "full")]
    assert (
        "visit 31 of sim://overlap: another visit of it runs" in (logs / "worker.log").read_text()
    )


@pytest.mark.parametrize("busy", ["origin", "hoster"])
def test_a_requests_visit_that_waited_for_its_busy_origin_or_hoster_still_retries_a_failure(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path, busy: str
) -> None:
    origin = Origin(settings, conn, ctx, tmp_path)
    logs = origin.logs
    env = {**ENV, "REVISIT_HOSTER_LIMITS": '{"overlap": 1}'}
    if busy == "origin":  # another visit of the origin runs
        hold(origin.redis, settings.redis_namespace, VISIT_TYPE, URL, "m9 other-run", 60_000)
        waiting = "visit 31 of sim://overlap: another visit of it runs"
    else:  # another visit of the hoster runs
        limiter = hoster_limiter(origin.redis, settings.redis_namespace, "overlap", 1, 60_000)
        slot = limiter.acquire()
        slot.__enter__()
        waiting = "sim://overlap: overlap has 1 visits running"
    # one more wait than its retries (1)
    origin.send(31, 0.0, time.time(), request_id=41, transient_failures=1)
    with running({"worker": WORKER}, env, logs):
        wait_for(
            lambda: (logs / "worker.log").read_text().count(waiting) >= 3, 60, "its waits", logs
        )
        if busy == "origin":
            release(origin.redis, settings.redis_namespace, VISIT_TYPE, URL, "m9 other-run")
        else:
            slot.__exit__(None, None, None)
        wait_for(
            lambda: any(s != "created" for _, s, _ in published(settings)), 60, "its end", logs
        )
    # retried after its transient failure, as if it had never waited
    assert [(visit, status) for visit, status, _ in published(settings)] == [
        (31, "created"),
        (31, "created"),
        (31, "full"),
    ]


def test_the_claim_of_a_killed_workers_visit_expires_and_the_visit_runs_again(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    origin = Origin(settings, conn, ctx, tmp_path)
    logs = origin.logs
    origin.send(40, 8.0, time.time())
    with running({"journal": ["revisit", "journal"]}, FAST, logs):
        with running({"worker": WORKER}, FAST, logs) as first:
            wait_for(lambda: origin.redis.exists(origin.claim), 60, "the visit's claim", logs)
            os.killpg(first["worker"].pid, signal.SIGKILL)  # and its pool's children
            first["worker"].wait(10)
        assert origin.redis.exists(origin.claim)  # left by the killed worker
        wait_for(lambda: not origin.redis.exists(origin.claim), 10, "the claim to expire", logs)
        # Dramatiq gives the killed worker's message back: its visit runs again.
        with running({"worker_again": WORKER}, FAST, logs):
            wait_for(lambda: origin.stats()["last_visit_status"] == "full", 60, "the visit", logs)
    assert [(v, s) for v, s, _ in published(settings)][-1] == (40, "full")


def test_a_visit_paused_past_its_claim_that_another_visit_took_stops_and_publishes_no_end(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    origin = Origin(settings, conn, ctx, tmp_path)
    logs = origin.logs
    origin.send(50, 30.0, time.time())
    one_thread = ["--processes", "1", "--threads", "1"]
    procs = {
        "express": ["revisit", "worker", "--lane", "express", *one_thread],
        "priority": ["revisit", "worker", "--lane", "priority", *one_thread],
        "journal": ["revisit", "journal"],
    }
    with running(procs, ENV, logs) as started:
        wait_for(lambda: origin.stats()["last_visit"] is not None, 60, "the first visit", logs)
        paused = origin.redis.get(origin.claim)
        os.killpg(started["express"].pid, signal.SIGSTOP)
        try:
            origin.send(51, 4.0, time.time(), request_id=41)
            wait_for(
                lambda: origin.redis.get(origin.claim) not in (None, paused),
                30,
                "the request's visit to claim the origin",
                logs,
            )
        finally:
            os.killpg(started["express"].pid, signal.SIGCONT)
        wait_for(lambda: origin.stats()["last_visit_number"] == 51, 60, "the request's visit", logs)
        dropped = "visit 50 of sim://overlap: another visit of it runs since; dropped"
        wait_for(lambda: dropped in (logs / "express.log").read_text(), 30, "the drop", logs)
    statuses = [(visit, status) for visit, status, _ in published(settings)]
    assert statuses == [(50, "created"), (51, "created"), (51, "full")]
