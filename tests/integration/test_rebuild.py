"""A mirror rebuild: placements made while it writes, one rebuild at a time, failures."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from app.db.connection import DictConnection, connect
from app.domain.placement import Placement
from app.services.context import Context
from app.services.mirror_sync import check, rebuild
from app.services.scheduling import schedule_step
from app.settings import Settings
from queues.mirror import RebuildInProgress, RebuildLost
from tests.integration.helpers import cli, list_origins

pytestmark = pytest.mark.every_mirror(sharded=True)

ORIGINS = 600


def urls(count: int) -> list[str]:
    return [f"https://forge.example/parallel/{i}.git" for i in range(count)]


def test_visits_scheduled_while_a_rebuild_writes_are_in_flight_after_it(
    conn: DictConnection, ctx: Context, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, urls(ORIGINS), now=now)
    rebuild(conn, ctx, "git", now)
    staging = ctx.mirror.stage
    scheduled: list[int] = []

    def stage_with_a_step_midway(visit_type: str, placements: Iterable[Placement]) -> None:
        def read() -> Iterator[Placement]:
            iterator = iter(placements)
            yield next(iterator)  # Postgres has been read: its snapshot is taken
            if not scheduled:
                with connect(settings) as other:
                    step = schedule_step(other, ctx, "git", 50, now + timedelta(seconds=1))
                scheduled.extend(o.origin_id for o in step.orders)
            yield from iterator

        staging(visit_type, read())

    monkeypatch.setattr(ctx.mirror, "stage", stage_with_a_step_midway)

    rebuild(conn, ctx, "git", now + timedelta(seconds=2))

    assert len(scheduled) == 50
    contents = ctx.mirror.contents("git")
    assert {contents[i][0] for i in scheduled} == {"inflight"}
    assert check(conn, ctx, "git", now + timedelta(seconds=2)) == []


def test_the_rebuild_command_rebuilds_a_lost_mirror(conn: DictConnection, ctx: Context) -> None:
    list_origins(conn, ctx, urls(40))
    ctx.mirror.client.delete(*ctx.mirror.keys("git").data_keys(), ctx.mirror.keys("git").meta)

    result = cli("mirror", "rebuild", "git")

    assert result.returncode == 0, result.stderr
    assert "git: 40 origins mirrored" in result.stdout
    assert len(ctx.mirror.contents("git")) == 40


def test_a_second_rebuild_is_refused_while_one_is_in_progress(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(20))
    rebuild(conn, ctx, "git", datetime.now(tz=UTC))
    first = ctx.mirror.begin_rebuild("git")
    staging = ctx.mirror.keys("git").staging()
    # Id 300,000,000 lives in shard 0 whether the mirror has 1 shard or 3.
    ctx.mirror.stage("git", [Placement(300_000_000, "pool", 1.0, "no_last_update", 1.0, 1)])

    with pytest.raises(RebuildInProgress, match=r"in progress \(.*:\d+:[0-9a-f]{8}\)"):
        rebuild(conn, ctx, "git", datetime.now(tz=UTC))

    # The first one's staging keys are untouched, and it can still finish.
    generation = ctx.mirror.generation(staging)
    [bucket] = ctx.mirror.client.zrange(staging.pool_index(generation, "no_last_update"), 0, -1)
    bucket_key = staging.pool_bucket(generation, "no_last_update", bucket)
    assert ctx.mirror.client.zscore(bucket_key, str(300_000_000)) == 1.0
    ctx.mirror.end_bulk("git", first)
    assert ctx.mirror.finish_rebuild("git", first) == 1


def lapsed_rebuild(ctx: Context) -> str:
    """The token of a rebuild begun then left to lapse (its marker's TTL ran out)."""
    token = ctx.mirror.begin_rebuild("git")
    for keys in ctx.mirror.shard_keys("git"):
        ctx.mirror.client.delete(keys.staging().meta)
    return token


def test_a_rebuild_whose_marker_lapsed_and_was_taken_over_is_not_swapped_in(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(20))
    lapsed = lapsed_rebuild(ctx)

    assert rebuild(conn, ctx, "git", datetime.now(tz=UTC)) == 20
    with pytest.raises(RebuildLost, match="REBUILD_LOST"):
        ctx.mirror.finish_rebuild("git", lapsed)
    assert len(ctx.mirror.contents("git")) == 20


def test_a_lapsed_rebuild_ending_its_bulk_writes_leaves_the_newer_rebuild_s_marker_alone(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(20))
    lapsed = lapsed_rebuild(ctx)
    newer = ctx.mirror.begin_rebuild("git")

    with pytest.raises(RebuildLost, match="lost its marker"):
        ctx.mirror.end_bulk("git", lapsed)

    markers = {ctx.mirror.client.get(k.staging().meta) for k in ctx.mirror.shard_keys("git")}
    assert markers == {f"bulk {newer}".encode()}
    ctx.mirror.stage("git", [Placement(300_000_000, "pool", 1.0, "no_last_update", 1.0, 1)])
    ctx.mirror.end_bulk("git", newer)
    assert ctx.mirror.finish_rebuild("git", newer) == 1


def test_the_scheduler_waits_while_another_process_rebuilds_the_lost_mirror(
    conn: DictConnection, ctx: Context
) -> None:
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, urls(20), now=now)
    rebuild(conn, ctx, "git", now)
    ctx.mirror.client.delete(*[k.meta for k in ctx.mirror.shard_keys("git")])  # mirror lost
    other = ctx.mirror.begin_rebuild("git")

    waiting = schedule_step(conn, ctx, "git", 5, now + timedelta(seconds=1))

    assert waiting.orders == [] and not waiting.rebuilt
    assert "in progress" in waiting.waiting_for_rebuild
    ctx.mirror.stage("git", [])
    ctx.mirror.end_bulk("git", other)
    ctx.mirror.finish_rebuild("git", other)  # an empty mirror, for this test
    rebuild(conn, ctx, "git", now)
    assert len(schedule_step(conn, ctx, "git", 5, now + timedelta(seconds=2)).orders) == 5


def test_the_rebuild_command_says_a_rebuild_is_in_progress(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(5))
    ctx.mirror.begin_rebuild("git")

    result = cli("mirror", "rebuild", "git")

    assert result.returncode == 1
    assert "error: git: a rebuild of the git mirror is in progress" in result.stderr


def test_a_failed_rebuild_releases_its_marker_so_the_next_one_need_not_wait(
    conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_origins(conn, ctx, urls(20))
    staging = ctx.mirror.stage

    def stage_then_fail(visit_type: str, placements: Iterable[Placement]) -> None:
        staging(visit_type, list(placements)[:5])
        raise ConnectionError("PostgreSQL went away")

    monkeypatch.setattr(ctx.mirror, "stage", stage_then_fail)
    with pytest.raises(ConnectionError):
        rebuild(conn, ctx, "git", datetime.now(tz=UTC))
    monkeypatch.undo()

    for keys in ctx.mirror.shard_keys("git"):
        assert not ctx.mirror.client.exists(keys.staging().meta, *keys.staging().data_keys())
    assert rebuild(conn, ctx, "git", datetime.now(tz=UTC)) == 20


def test_a_rebuild_that_spills_its_pools_to_sorted_runs_orders_them_as_one_held_in_memory(
    conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    import queues.sorted_runs

    now = datetime.now(tz=UTC)
    every = urls(300)
    list_origins(conn, ctx, every[:150], now=now - timedelta(hours=1))
    list_origins(conn, ctx, every[150:], now=now)  # 150 equal scores: ordered by id text

    def pop_order() -> list[int]:
        cooldown_s = ctx.cooldowns.scheduled.total_seconds()
        popped = ctx.mirror.pop("git", 300, now.timestamp(), cooldown_s, "due", peek=True)
        return [p.id for p in popped.popped]

    rebuild(conn, ctx, "git", now)
    in_memory = pop_order()
    monkeypatch.setattr(queues.sorted_runs, "RUN", 7)
    rebuild(conn, ctx, "git", now)
    assert len(in_memory) == 300 and pop_order() == in_memory
    assert check(conn, ctx, "git", now) == []
