"""A rebuild split over processes, and placements made while a rebuild writes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

import app.mirror_sync as mirror_sync
from app.context import Context
from app.db.connection import DictConnection, connect
from app.domain.placement import Placement
from app.mirror_sync import check, id_shares, rebuild
from app.scheduling import schedule_step
from app.settings import Settings
from queues.mirror import RebuildInProgress, RebuildLost
from tests.integration.helpers import cli, list_origins

pytestmark = pytest.mark.every_mirror(sharded=True)

ORIGINS = 600


def urls(count: int) -> list[str]:
    return [f"https://forge.example/parallel/{i}.git" for i in range(count)]


def give_history(conn: DictConnection) -> None:
    """Vary the origins' places: some visited (cooling or due), some in flight."""
    conn.execute(
        """
        update origin_visit_stats set
          last_successful = now() - make_interval(days => (id % 40)::int),
          last_visit = now() - make_interval(days => (id % 40)::int),
          last_visit_status = 'full',
          last_snapshot = '\\x01'::bytea
        where id % 3 = 0;
        update origin_visit_stats set last_scheduled = now() - interval '1 hour'
        where id % 7 = 0;
        """
    )


def test_a_rebuild_over_three_processes_gives_the_mirror_one_process_gives(
    conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mirror_sync, "PARALLEL_REBUILD_MIN_IDS", 1)
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, urls(ORIGINS), now=now)
    give_history(conn)

    alone = rebuild(conn, ctx, "git", now, processes=1)
    one_process = ctx.mirror.contents("git")
    assert len(id_shares(conn, "git", 3)) == 3
    split = rebuild(conn, ctx, "git", now, processes=3)

    assert alone == split == ORIGINS
    assert ctx.mirror.contents("git") == one_process
    assert check(conn, ctx, "git", now) == []


def test_a_small_visit_type_is_rebuilt_in_one_process(conn: DictConnection, ctx: Context) -> None:
    list_origins(conn, ctx, urls(10))

    assert id_shares(conn, "git", 4) == [None]
    assert id_shares(conn, "hg", 4) == [None]


def test_a_rebuild_refuses_zero_processes(conn: DictConnection, ctx: Context) -> None:
    list_origins(conn, ctx, urls(3))

    with pytest.raises(ValueError, match="at least one process, not 0"):
        rebuild(conn, ctx, "git", datetime.now(tz=UTC), processes=0)
    assert len(ctx.mirror.contents("git")) == 3
    assert not ctx.mirror.client.exists(ctx.mirror.keys("git").staging().meta)


def test_visits_scheduled_while_a_rebuild_writes_are_in_flight_after_it(
    conn: DictConnection, ctx: Context, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mirror_sync, "PARALLEL_REBUILD_MIN_IDS", 1)
    now = datetime.now(tz=UTC)
    list_origins(conn, ctx, urls(ORIGINS), now=now)
    rebuild(conn, ctx, "git", now, processes=1)
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

    rebuild(conn, ctx, "git", now + timedelta(seconds=2), processes=2)

    assert len(scheduled) == 50
    contents = ctx.mirror.contents("git")
    assert {contents[i][0] for i in scheduled} == {"inflight"}
    assert check(conn, ctx, "git", now + timedelta(seconds=2)) == []


def test_the_rebuild_command_splits_over_the_processes_asked_for(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(40))
    ctx.mirror.client.delete(*ctx.mirror.keys("git").data_keys())

    result = cli("mirror", "rebuild", "git", "--processes", "2")

    assert result.returncode == 0, result.stderr
    assert "git: 40 origins mirrored" in result.stdout
    assert len(ctx.mirror.contents("git")) == 40


def test_the_rebuild_command_refuses_zero_processes_before_touching_redis(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(5))
    before = ctx.mirror.contents("git")

    result = cli("mirror", "rebuild", "git", "--processes", "0")

    assert result.returncode == 2
    assert "Invalid value for '--processes'" in result.stderr
    assert "greater than or equal to 1" in result.stderr
    assert ctx.mirror.contents("git") == before
    assert not ctx.mirror.client.exists(ctx.mirror.keys("git").staging().meta)


def test_a_second_rebuild_is_refused_while_one_is_in_progress(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(20))
    rebuild(conn, ctx, "git", datetime.now(tz=UTC), processes=1)
    first = ctx.mirror.begin_rebuild("git")
    staging = ctx.mirror.keys("git").staging()
    # Id 300,000,000 lives in shard 0 whether the mirror has 1 shard or 3.
    ctx.mirror.stage("git", [Placement(300_000_000, "pool", 1.0, "no_last_update", 1.0, 1)])

    with pytest.raises(RebuildInProgress, match=r"in progress \(.*:\d+:[0-9a-f]{8}\)"):
        rebuild(conn, ctx, "git", datetime.now(tz=UTC), processes=1)

    # The first one's staging keys are untouched, and it can still finish.
    assert ctx.mirror.client.zscore(staging.pool("no_last_update"), str(300_000_000)) == 1.0
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

    assert rebuild(conn, ctx, "git", datetime.now(tz=UTC), processes=1) == 20
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
    rebuild(conn, ctx, "git", now, processes=1)
    ctx.mirror.client.delete(*[k.meta for k in ctx.mirror.shard_keys("git")])  # mirror lost
    other = ctx.mirror.begin_rebuild("git")

    waiting = schedule_step(conn, ctx, "git", 5, now + timedelta(seconds=1))

    assert waiting.orders == [] and not waiting.rebuilt
    assert "in progress" in waiting.waiting_for_rebuild
    ctx.mirror.stage("git", [])
    ctx.mirror.end_bulk("git", other)
    ctx.mirror.finish_rebuild("git", other)  # an empty mirror, for this test
    rebuild(conn, ctx, "git", now, processes=1)
    assert len(schedule_step(conn, ctx, "git", 5, now + timedelta(seconds=2)).orders) == 5


def test_the_rebuild_command_says_a_rebuild_is_in_progress(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, urls(5))
    ctx.mirror.begin_rebuild("git")

    result = cli("mirror", "rebuild", "git")

    assert result.returncode == 1
    assert "git: a rebuild of the git mirror is in progress" in result.stderr


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
        rebuild(conn, ctx, "git", datetime.now(tz=UTC), processes=1)
    monkeypatch.undo()

    for keys in ctx.mirror.shard_keys("git"):
        assert not ctx.mirror.client.exists(keys.staging().meta, *keys.staging().data_keys())
    assert rebuild(conn, ctx, "git", datetime.now(tz=UTC), processes=1) == 20
