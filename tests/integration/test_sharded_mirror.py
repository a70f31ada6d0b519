"""A visit type's mirror split into shards (queues.shards), on one Redis and on
the Redis Cluster, where the shards land on different masters."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from app.db.connection import DictConnection
from app.db.scheduling import visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.domain.placement import Placement
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.mirror_sync import check, ensure_built, rebuild
from app.services.scheduling import schedule_step
from app.settings import Settings
from queues.keys import VisitTypeKeys, shard_of
from tests.integration.helpers import list_origins

pytestmark = pytest.mark.every_mirror

SHARDS = 3
URLS = [f"https://forge.example/sharded{i}.git" for i in range(60)]


def sharded(settings: Settings, shards: int = SHARDS) -> Context:
    return Context.from_settings(settings.model_copy(update={"mirror_shards": {"git": shards}}))


def built_in(settings: Settings, conn: DictConnection, shards: int) -> tuple[Context, datetime]:
    """The origins of URLS listed, and their mirror rebuilt in ``shards`` shards."""
    ctx = sharded(settings, shards)
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS, now=now)
    rebuild(conn, ctx, "git", now)
    return ctx, now


def in_pool(origin: int) -> Placement:
    return Placement(origin, "pool", float(origin), "no_last_update", float(origin), 1)


def test_a_sharded_visit_type_spreads_over_its_shards_and_equals_postgres(
    settings: Settings, conn: DictConnection, mirror_backend: str
) -> None:
    ctx = sharded(settings)
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS, now=now)
    rebuild(conn, ctx, "git", now)

    per_shard = Counter(shard_of(origin, SHARDS) for origin in ctx.mirror.contents("git"))
    assert per_shard == {0: 20, 1: 20, 2: 20}
    assert check(conn, ctx, "git", now) == []
    if mirror_backend == "cluster":
        client = ctx.mirror.client
        assert isinstance(client, redis.RedisCluster)
        nodes = {client.get_node_from_key(k.inflight).name for k in ctx.mirror.shard_keys("git")}
        assert len(nodes) > 1


def test_a_sharded_pop_draws_from_every_shard_in_proportion_to_its_size(
    settings: Settings,
) -> None:
    ctx = sharded(settings)
    sizes = {0: 30, 1: 60, 2: 90}
    ids = [i for shard, size in sizes.items() for i in range(shard, 3 * size, 3)]
    ctx.mirror.place("git", [in_pool(i) for i in ids])

    result = ctx.mirror.pop("git", 60, 1e9, 3600.0, [0, 0, 1, 0])

    taken = [p.id for p in result.popped]
    assert Counter(shard_of(i, SHARDS) for i in taken) == {0: 10, 1: 20, 2: 30}
    assert len(set(taken)) == 60
    assert [p.score for p in result.popped] == sorted(p.score for p in result.popped)
    assert ctx.mirror.sizes("git")["inflight"] == 60


def test_a_sharded_pop_takes_the_shortfall_of_a_dry_shard_from_the_others(
    settings: Settings,
) -> None:
    ctx = sharded(settings)
    ids = [*range(3, 60, 3), 1, 2]  # shard 0 holds 19, shards 1 and 2 one each
    ctx.mirror.place("git", [in_pool(i) for i in ids])

    result = ctx.mirror.pop("git", 12, 1e9, 3600.0, [0, 0, 1, 0])

    assert len({p.id for p in result.popped}) == 12


def test_a_sharded_claim_takes_the_best_ranked_claimable_origins(settings: Settings) -> None:
    ctx = sharded(settings)
    ctx.mirror.place("git", [in_pool(i) for i in range(1, 13)])
    ctx.mirror.claim("git", [4], 1e9, 1)  # in flight already: skipped

    claimed = ctx.mirror.claim("git", [4, 9, 2, 7, 3, 11], 1e9, 3)

    assert [p.id for p in claimed] == [9, 2, 7]


def test_scheduling_and_the_journal_on_a_sharded_mirror_keep_it_equal_to_postgres(
    settings: Settings, conn: DictConnection
) -> None:
    ctx = sharded(settings)
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS, now=now)
    sent = schedule_step(conn, ctx, "git", 15, now)
    events = [
        VisitStatusEvent(order.url, "git", order.visit, now, "full", b"s" * 20)
        for order in sent.orders[:10]
    ]
    apply_events_batch(conn, ctx, events, visit_type_configs(conn), now)

    assert len(sent.orders) == 15
    assert check(conn, ctx, "git", now) == []


def test_changing_the_number_of_shards_rebuilds_the_mirror_in_the_new_split(
    settings: Settings, conn: DictConnection
) -> None:
    three, now = built_in(settings, conn, 3)
    two = sharded(settings, 2)

    assert ensure_built(conn, two, "git", now)

    assert check(conn, two, "git", now) == []
    assert not two.mirror.client.exists(three.mirror.keys("git", 2).inflight)
    assert not three.mirror.client.keys(f"{three.mirror.keys('git', 2).versions}:*")
    assert not ensure_built(conn, two, "git", now)


class Crash(BaseException):
    """The process dies here (a kill, a lost host)."""


def crash_after_swaps(ctx: Context, monkeypatch: pytest.MonkeyPatch, swaps: int) -> None:
    """Make the rebuild of ``ctx``'s mirror die right after its first ``swaps`` swaps."""
    step = ctx.mirror._rebuild_step
    swapped: list[int] = []

    def dying(live: VisitTypeKeys, name: str, token: str, *args: Any) -> Any:
        reply = step(live, name, token, *args)
        if name == "swap":
            swapped.append(live.shard)
            if len(swapped) == swaps:
                raise Crash
        return reply

    monkeypatch.setattr(ctx.mirror, "_rebuild_step", dying)


def test_a_rebuild_dying_after_its_last_swap_leaves_a_built_mirror(
    settings: Settings, conn: DictConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = sharded(settings)
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, URLS, now=now)
    ctx.mirror.client.flushdb()  # Redis restarted empty
    crash_after_swaps(ctx, monkeypatch, SHARDS)

    with pytest.raises(Crash):
        ensure_built(conn, ctx, "git", now)

    restarted = sharded(settings)
    assert restarted.mirror.is_built("git")
    assert not ensure_built(conn, restarted, "git", now)
    assert check(conn, restarted, "git", now) == []


def test_a_rebuild_into_a_new_split_dying_between_two_swaps_is_rebuilt_by_the_next_step(
    settings: Settings, conn: DictConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, now = built_in(settings, conn, 4)
    two = sharded(settings, 2)
    crash_after_swaps(two, monkeypatch, 1)

    with pytest.raises(Crash):
        ensure_built(conn, two, "git", now)

    restarted = sharded(settings, 2)
    assert not restarted.mirror.is_built("git")  # its shard 1 still holds a quarter
    assert ensure_built(conn, restarted, "git", now)
    assert check(conn, restarted, "git", now) == []


def test_an_origins_rank_counts_the_origins_ahead_of_it_in_every_shard(
    settings: Settings,
) -> None:
    ctx = sharded(settings)
    ctx.mirror.place("git", [in_pool(i) for i in range(1, 31)])

    location = ctx.mirror.locate("git", 10)

    assert (location.pool, location.score, location.rank) == ("no_last_update", 10.0, 9)


@pytest.mark.every_mirror(sharded=True)
def test_a_due_pop_takes_the_most_due_origins_however_they_are_spread_over_shards(
    ctx: Context,
) -> None:
    now_s = 1e9
    # Shard 1 (ids 1 mod 3) holds a few long overdue origins, shard 0 many due
    # later, shard 2 many whose forge reports no change (not due yet).
    overdue = [Placement(i, "pool", 100.0 + i, "no_last_update", 100.0 + i) for i in (1, 4, 7, 10)]
    later = [Placement(i, "pool", 1e6 + i, "no_last_update", 1e6 + i) for i in range(0, 120, 3)]
    not_due = [Placement(i, "pool", now_s + i, "up_to_date", now_s + i) for i in range(2, 120, 3)]
    ctx.mirror.place("git", [*overdue, *later, *not_due])

    peeked = ctx.mirror.pop("git", 10, now_s, 3600.0, "due", peek=True)
    popped = ctx.mirror.pop("git", 10, now_s, 3600.0, "due")

    most_due = {p.id for p in overdue} | {0, 3, 6, 9, 12, 15}
    assert {p.id for p in peeked.popped} == most_due
    assert {p.id for p in popped.popped} == most_due
    assert ctx.mirror.sizes("git")["inflight"] == 10


@pytest.mark.every_mirror(sharded=True)
def test_a_due_pop_keeps_its_first_visit_share_when_the_due_origins_are_in_another_shard(
    ctx: Context,
) -> None:
    now_s = 1e9
    # Shard 1 holds every overdue origin, shard 0 the never visited ones
    # (listed with a recent last_update), shard 2 origins not due yet.
    overdue = [
        Placement(i, "pool", 100.0 + i, "no_last_update", 100.0 + i) for i in range(1, 60, 3)
    ]
    never = [Placement(i, "pool", 9e8 + i, "never_visited", 9e8 + i) for i in range(0, 60, 3)]
    not_due = [Placement(i, "pool", now_s + i, "up_to_date", now_s + i) for i in range(2, 60, 3)]
    ctx.mirror.place("git", [*overdue, *never, *not_due])

    popped = ctx.mirror.pop("git", 10, now_s, 3600.0, "due", first_visit_share=0.2)

    assert [p.id for p in popped.popped] == [0, 3, 1, 4, 7, 10, 13, 16, 19, 22]


@pytest.mark.every_mirror(sharded=True)
def test_small_due_pops_never_take_more_than_asked_while_first_visits_are_owed(
    ctx: Context,
) -> None:
    now_s = 1e9
    # Every shard holds never visited origins, each owed a part of a slot per pop.
    never = [Placement(i, "pool", 9e8 + i, "never_visited", 9e8 + i) for i in range(60)]
    ctx.mirror.place("git", never)
    for keys in ctx.mirror.shard_keys("git"):  # a built mirror keeps what each pool is owed
        ctx.mirror.client.hset(keys.meta, "rebuilt_at", now_s)

    taken = [
        len(ctx.mirror.pop("git", 1, now_s, 3600.0, "due", first_visit_share=0.5).popped)
        for _ in range(12)
    ]

    assert taken == [1] * 12
