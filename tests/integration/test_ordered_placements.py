"""Placements reach Redis in any order, the mirror keeps the newest (issue 14)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer

from actors.journal import JournalClient, WrittenBatch
from app.db.connection import DictConnection
from app.domain.placement import Placement
from app.kafka.client import ensure_topics, producer_config
from app.kafka.codec import encode, visit_status_key, visit_status_value
from app.services.context import Context
from app.services.mirror_sync import check, rebuild
from app.services.scheduling import schedule_step
from app.settings import Settings
from queues.mirror import TOUCHED_BATCH
from tests.integration.helpers import list_origins
from tests.processes import wait_for

pytestmark = pytest.mark.every_mirror

URL = "https://forge.example/ordered.git"


def stats_version(conn: DictConnection, origin_id: int) -> int:
    row = conn.execute("select version from origin_visit_stats where id = %s", [origin_id])
    return int(row.fetchone()["version"])  # type: ignore[index]


def mirror_version(ctx: Context, origin_id: int) -> int | None:
    keys = ctx.mirror.keys("git")
    generation = ctx.mirror.client.hget(keys.meta, "versions")
    bucket, field = keys.version_bucket(generation.decode() if generation else "0", origin_id)
    value = ctx.mirror.client.hget(bucket, str(field))
    # an entry: '<version>[ <pool> <score>]'
    return int(value.split()[0]) if value is not None else None


def version_buckets(ctx: Context) -> list[bytes]:
    """The version buckets of every generation (not the pools beside them)."""
    prefix = ctx.mirror.keys("git").versions
    found = ctx.mirror.client.scan_iter(match=f"{prefix}*")
    return [k for k in found if re.fullmatch(rb"[^:]+:\d+", k[len(prefix) + 1 :])]


def test_an_older_placement_reaching_redis_last_is_refused(ctx: Context) -> None:
    newer = Placement(7, "cooling", 2000.0, "up_to_date", 50.0, version=5)
    older = Placement(7, "pool", 10.0, "no_last_update", 10.0, version=4)
    ctx.mirror.place("git", [newer])

    moved = ctx.mirror.place("git", [older])

    assert moved == 0
    assert ctx.mirror.contents("git") == {7: ("cooling", 2000.0)}
    assert mirror_version(ctx, 7) == 5


def test_the_same_version_placed_again_is_applied(ctx: Context) -> None:
    first = Placement(7, "pool", 10.0, "no_last_update", 10.0, version=3)
    ctx.mirror.place("git", [first])
    ctx.mirror.pop("git", 1, 100.0, 3600.0)

    moved = ctx.mirror.place("git", [first])

    assert moved == 1
    assert ctx.mirror.contents("git") == {7: ("no_last_update", 10.0)}


def test_a_placement_during_a_rebuild_survives_the_rebuild(ctx: Context) -> None:
    snapshot = [Placement(i, "pool", float(i), "no_last_update", float(i), 1) for i in range(1, 5)]
    during = Placement(2, "cooling", 900.0, "up_to_date", 40.0, version=2)
    after = Placement(3, "inflight", 950.0, "lagging", 30.0, version=2)

    def read_from_postgres() -> Iterator[Placement]:
        # The journal places origin 2 after the rebuild read its (older) row.
        yield snapshot[0]
        ctx.mirror.place("git", [during])
        yield from snapshot[1:]

    token = ctx.mirror.begin_rebuild("git")
    ctx.mirror.stage("git", read_from_postgres())
    touched = ctx.mirror.end_bulk("git", token)
    # Past the bulk phase, a placement reaches the staging keys at once.
    ctx.mirror.place("git", [after])
    # The rebuild reads the touched origins again; Postgres has origin 2's
    # newer row by then.
    ctx.mirror.place_staged("git", [during])
    held = ctx.mirror.finish_rebuild("git", token)

    assert touched == {2}
    assert held == 4
    assert ctx.mirror.contents("git") == {
        1: ("no_last_update", 1.0),
        2: ("cooling", 900.0),
        3: ("inflight", 950.0),
        4: ("no_last_update", 4.0),
    }
    assert mirror_version(ctx, 2) == 2


def test_origins_placed_early_in_a_long_rebuild_are_still_reread_at_its_end(
    ctx: Context,
) -> None:
    staging = ctx.mirror.keys("git").staging()
    token = ctx.mirror.begin_rebuild("git")
    ctx.mirror.place("git", [Placement(1, "cooling", 900.0, "up_to_date", 40.0, 3)])
    # The set would expire long before the rebuild ends but for its renewals.
    ctx.mirror.client.pexpire(staging.touched, 300)
    ctx.mirror.rebuild_renew_s = 0.05

    with ctx.mirror.renewing("git"):
        ctx.mirror.stage("git", [Placement(2, "pool", 2.0, "no_last_update", 2.0, 1)])
        time.sleep(0.5)

        assert ctx.mirror.end_bulk("git", token) == {1}


def test_more_touched_origins_than_one_drain_batch_are_all_returned_and_the_set_is_gone(
    ctx: Context,
) -> None:
    staging = ctx.mirror.keys("git").staging()
    token = ctx.mirror.begin_rebuild("git")
    count = TOUCHED_BATCH * 2 + 7
    ctx.mirror.place(
        "git",
        [
            Placement(i, "pool", float(i), "no_last_update", float(i), 1)
            for i in range(1, count + 1)
        ],
    )

    touched = ctx.mirror.end_bulk("git", token)

    assert touched == set(range(1, count + 1))
    assert not ctx.mirror.client.exists(staging.touched)
    assert ctx.mirror.client.get(staging.meta) == f"direct {token}".encode()


def test_a_reread_older_than_a_placement_after_the_bulk_phase_is_refused(ctx: Context) -> None:
    token = ctx.mirror.begin_rebuild("git")
    ctx.mirror.stage("git", [Placement(1, "pool", 1.0, "no_last_update", 1.0, 1)])
    ctx.mirror.end_bulk("git", token)
    ctx.mirror.place("git", [Placement(1, "cooling", 900.0, "up_to_date", 40.0, 3)])

    ctx.mirror.place_staged("git", [Placement(1, "pool", 5.0, "lagging", 5.0, 2)])
    ctx.mirror.finish_rebuild("git", token)

    assert ctx.mirror.contents("git") == {1: ("cooling", 900.0)}
    assert mirror_version(ctx, 1) == 3


def test_the_scheduler_confirms_its_picks_in_flight_at_their_new_version(
    conn: DictConnection, ctx: Context
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, [URL], now=now)
    [origin_id] = ctx.mirror.contents("git")

    schedule_step(conn, ctx, "git", 5, now)

    assert mirror_version(ctx, origin_id) == stats_version(conn, origin_id)
    assert check(conn, ctx, "git", now) == []


@pytest.mark.parametrize(
    "update",
    [
        "update origin_visit_stats set last_duration_s = 1 where id = %s",
        "update origin_visit_stats set last_duration_s = 1, version = version + 1 where id = %s",
        "update origin_visit_stats set last_duration_s = 1, version = version where id = %s",
        "update origin_visit_stats set last_duration_s = 1, version = 1000 where id = %s",
    ],
    ids=["not-naming-version", "bumping-it-itself", "keeping-it", "setting-another-value"],
)
def test_every_update_moves_the_version_by_exactly_one(
    conn: DictConnection, ctx: Context, update: str
) -> None:
    list_origins(conn, ctx, [URL])
    [origin_id] = ctx.mirror.contents("git")
    before = stats_version(conn, origin_id)

    conn.execute(update, [origin_id])

    assert stats_version(conn, origin_id) == before + 1


def test_a_journal_client_delayed_before_placing_cannot_leave_the_older_place(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    """Two clients share the topic; the one that applied the first visit stalls
    between its commit and its placement until the other has applied and placed
    the second visit. Its older placement must not win."""
    start = datetime.now(tz=UTC)
    list_origins(conn, ctx, [URL], now=start - timedelta(minutes=10))
    schedule_step(conn, ctx, "git", 5, start - timedelta(minutes=9))
    [origin_id] = ctx.mirror.contents("git")
    ensure_topics(settings)
    producer = Producer(producer_config(settings))

    def publish(visit: int, date: datetime, partition: int) -> None:
        value = visit_status_value(URL, visit, date, "full", bytes([visit]) * 20, "git", None)
        key = visit_status_key(URL, visit, date)
        producer.produce(settings.journal_topic, encode(value), key, partition=partition)
        producer.flush(10)

    clients: list[JournalClient] = []
    stalled = threading.Event()
    resumed = threading.Event()

    def stall_first() -> None:
        # Only this origin's statuses are published: the first batch is visit 1.
        if stalled.is_set():
            return
        stalled.set()
        # Hold the first visit's placement until the second visit is placed.
        resumed.wait(60)

    stop = threading.Event()
    assigned: dict[int, list[int]] = {}
    for index in range(2):
        client = JournalClient(settings, after_transaction=stall_first)
        # Learn each client's partitions from the rebalance itself (the
        # consumer is not to be called from another thread while it polls).
        client.consumer.subscribe(
            [settings.journal_topic],
            on_assign=lambda _c, parts, i=index: assigned.__setitem__(
                i, [p.partition for p in parts]
            ),
            on_revoke=lambda _c, _parts, i=index: assigned.pop(i, None),
        )
        clients.append(client)
    placed_late = threading.Event()
    place = clients[0].place

    def place_then_note(written: WrittenBatch, now: datetime) -> int:
        moved = place(written, now)
        if resumed.is_set():
            placed_late.set()
        return moved

    clients[0].place = place_then_note  # type: ignore[method-assign]
    threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    try:
        wait_for(
            lambda: len(assigned) == 2 and sum(len(p) for p in assigned.values()) == 4,
            60,
            "both clients to share the topic's partitions",
        )
        first_partition, second_partition = assigned[0][0], assigned[1][0]

        publish(1, start - timedelta(seconds=90), first_partition)
        wait_for(stalled.is_set, 30, "the first client to commit visit 1")
        version_after_first = stats_version(conn, origin_id)
        publish(2, start - timedelta(seconds=30), second_partition)
        wait_for(
            lambda: (
                stats_version(conn, origin_id) > version_after_first
                and mirror_version(ctx, origin_id) == stats_version(conn, origin_id)
            ),
            30,
            "the second client to commit and place visit 2",
        )
        resumed.set()
        wait_for(placed_late.is_set, 30, "the first client to place visit 1 at last")
    finally:
        resumed.set()
        stop.set()
        for thread in threads:
            thread.join(30)

    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []
    assert mirror_version(ctx, origin_id) == stats_version(conn, origin_id)
    row = conn.execute("select last_visit_number from origin_visit_stats").fetchone()
    assert row is not None and row["last_visit_number"] == 2


def test_a_rebuild_records_the_version_of_every_origin_it_places(
    conn: DictConnection, ctx: Context
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, [URL, URL.replace("ordered", "other")], now=now)
    rebuild(conn, ctx, "git", now)

    assert check(conn, ctx, "git", now) == []
    assert {mirror_version(ctx, i) for i in ctx.mirror.contents("git")} == {1}


#: Ids on both sides of version bucket boundaries (256 ids a bucket), and a large one.
BOUNDARY_IDS = [1, 255, 256, 257, 511, 512, 2**40 + 3]


def rebuilt_at_version(ctx: Context, ids: list[int], version: int) -> None:
    """Rebuild git's mirror with each of ``ids`` cooling at ``version``."""
    token = ctx.mirror.begin_rebuild("git")
    ctx.mirror.stage(
        "git", [Placement(i, "cooling", 2000.0, "up_to_date", 50.0, version) for i in ids]
    )
    ctx.mirror.end_bulk("git", token)
    ctx.mirror.finish_rebuild("git", token)


def test_an_older_placement_is_refused_after_a_rebuild_whatever_the_version_bucket(
    ctx: Context,
) -> None:
    ctx.mirror.place("git", [Placement(i, "pool", 1.0, "lagging", 1.0, 1) for i in BOUNDARY_IDS])
    rebuilt_at_version(ctx, BOUNDARY_IDS, 5)
    older = [Placement(i, "pool", 10.0, "no_last_update", 10.0, 4) for i in BOUNDARY_IDS]

    in_one_call = ctx.mirror.place("git", older)
    one_by_one = sum(ctx.mirror.place("git", [p], keep_inflight=True) for p in older)

    assert in_one_call == one_by_one == 0
    assert ctx.mirror.contents("git") == {i: ("cooling", 2000.0) for i in BOUNDARY_IDS}
    assert [mirror_version(ctx, i) for i in BOUNDARY_IDS] == [5] * len(BOUNDARY_IDS)


def test_the_versions_are_kept_in_compact_hashes_and_a_rebuild_drops_the_older_ones(
    ctx: Context,
) -> None:
    ids = list(range(1, 3001))
    ctx.mirror.place("git", [Placement(i, "pool", 1.0, "lagging", 1.0, 1) for i in ids])
    rebuilt_at_version(ctx, ids, 2)
    client = ctx.mirror.client

    buckets = version_buckets(ctx)

    assert len(buckets) == 12  # 3,000 ids, 256 a bucket, of the rebuild's generation only
    assert {client.object("encoding", key) for key in buckets} == {b"listpack"}
    assert {mirror_version(ctx, i) for i in ids} == {2}


def test_a_mirror_built_before_the_version_buckets_counts_as_not_built_until_rebuilt(
    conn: DictConnection, ctx: Context
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, [URL], now=now)
    rebuild(conn, ctx, "git", now)
    keys = ctx.mirror.keys("git")
    # As such a mirror was left: no generation in its meta, one version hash.
    ctx.mirror.client.hdel(keys.meta, "versions")
    ctx.mirror.client.hset(keys.versions, "1", "1")
    assert not ctx.mirror.is_built("git")

    rebuild(conn, ctx, "git", now)

    assert ctx.mirror.is_built("git")
    assert ctx.mirror.client.type(keys.versions) == b"none"
    assert check(conn, ctx, "git", now) == []


def test_the_next_rebuild_drops_the_version_buckets_of_a_rebuild_that_died(
    ctx: Context,
) -> None:
    ids = list(range(1, 1001))
    dead = ctx.mirror.begin_rebuild("git")
    ctx.mirror.stage("git", [Placement(i, "pool", 1.0, "lagging", 1.0, 3) for i in ids])
    ctx.mirror.client.delete(ctx.mirror.keys("git").staging().meta)  # its marker lapsed

    rebuilt_at_version(ctx, ids[:10], 4)

    left = version_buckets(ctx)
    assert left and not [k for k in left if dead.rsplit(":", 1)[-1] in k.decode()]
    assert len(left) == 1  # ids 1-10, the live generation's one bucket
