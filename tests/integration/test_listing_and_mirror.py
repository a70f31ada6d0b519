from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.db.connection import DictConnection
from app.domain.placement import epoch_s
from app.services.context import Context
from app.services.mirror_sync import LOST_VISIT_GRACE_S, check, ensure_built, rebuild
from app.services.scheduling import schedule_step
from app.settings import Settings
from tests.integration.helpers import bucket_of, cli, list_origins, pool_members, stats_by_url

pytestmark = pytest.mark.every_mirror

NOW = datetime(2026, 6, 1, tzinfo=UTC)
URLS = [f"https://forge.example/r{i}.git" for i in range(30)]


def test_listed_origins_land_in_postgres_and_in_the_pool(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    stats = stats_by_url(conn)
    assert set(stats) == set(URLS)
    assert ctx.mirror.sizes("git")["no_last_update"] == 30
    assert sum(ctx.mirror.sizes("git").values()) == 30
    assert check(conn, ctx, "git", NOW) == []


def test_pop_moves_origins_in_flight_and_stamps_last_scheduled(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    result = schedule_step(conn, ctx, "git", 10, NOW)
    assert len(result.orders) == 10
    sizes = ctx.mirror.sizes("git")
    assert (sizes["no_last_update"], sizes["inflight"], sum(sizes.values())) == (20, 10, 30)
    scheduled = {u for u, r in stats_by_url(conn).items() if r["last_scheduled"] == NOW}
    assert scheduled == {o.url for o in result.orders}
    assert check(conn, ctx, "git", NOW) == []


def test_visit_that_never_reports_returns_to_its_pool_after_the_scheduled_cooldown(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:3], now=NOW)
    first = schedule_step(conn, ctx, "git", 3, NOW)
    assert len(first.orders) == 3
    early = schedule_step(conn, ctx, "git", 3, NOW + ctx.cooldowns.scheduled - timedelta(seconds=1))
    assert (early.lost, early.orders) == (0, [])
    later = schedule_step(conn, ctx, "git", 3, NOW + ctx.cooldowns.scheduled)
    assert later.lost == 3
    assert {o.url for o in later.orders} == set(URLS[:3])


def test_flushed_redis_is_rebuilt_equal_to_postgres(conn: DictConnection, ctx: Context) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    schedule_step(conn, ctx, "git", 7, NOW)
    before = ctx.mirror.contents("git")
    ctx.mirror.client.flushdb()
    assert ctx.mirror.contents("git") == {}
    assert ensure_built(conn, ctx, "git", NOW) is True
    # The visits in flight lost their messages with Redis: they return after the grace.
    back = epoch_s(NOW) + LOST_VISIT_GRACE_S - ctx.cooldowns.scheduled.total_seconds()
    assert ctx.mirror.contents("git") == {
        i: ("inflight", back) if place == "inflight" else (place, score)
        for i, (place, score) in before.items()
    }
    assert ensure_built(conn, ctx, "git", NOW) is False
    assert check(conn, ctx, "git", NOW) == []


def test_mirror_check_reports_an_origin_missing_from_redis(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:2], now=NOW)
    rebuild(conn, ctx, "git", NOW)
    [(member, _), *_] = pool_members(ctx.mirror, "git", "no_last_update")
    ctx.mirror.client.zrem(bucket_of(ctx.mirror, "git", "no_last_update", int(member)), member)
    differences = check(conn, ctx, "git", NOW)
    assert [(d.origin_id, d.expected, d.actual) for d in differences] == [
        (int(member), "no_last_update", "nothing")
    ]


def test_new_origins_are_targeted_no_later_than_the_queue_position(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:1], now=NOW)
    assert pool_members(ctx.mirror, "git", "no_last_update") == [(b"1", epoch_s(NOW))]


def test_import_with_a_malformed_line_names_line_and_field_and_writes_nothing(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    assert cli("lister", "register", "gitlab", "example").returncode == 0
    listing = tmp_path / "origins.jsonl"
    listing.write_text(
        '{"url": "https://a.example/1", "visit_type": "git"}\n'
        '{"url": "https://a.example/2", "visit_type": "git", "is_fork": "perhaps"}\n'
    )
    result = cli("origins", "import", str(listing), "--lister", "gitlab/example")
    assert result.returncode == 2
    assert "line 2: is_fork" in result.stderr
    assert conn.execute("select count(*) as n from listed_origins").fetchone() == {"n": 0}


def test_import_from_stdin_records_every_origin(settings: Settings, conn: DictConnection) -> None:
    assert cli("lister", "register", "gitlab", "example").returncode == 0
    lines = "".join(f'{{"url": "{u}", "visit_type": "git"}}\n' for u in URLS)
    result = cli("origins", "import", "-", "--lister", "gitlab/example", stdin=lines)
    assert result.returncode == 0, result.stderr
    assert conn.execute("select count(*) as n from listed_origins").fetchone() == {"n": 30}
    show = cli("origin", "show", URLS[0])
    assert show.returncode == 0 and "no_last_update" in show.stdout


def test_import_with_an_unknown_visit_type_creates_it_paused_and_a_bad_name_is_refused(
    settings: Settings, conn: DictConnection
) -> None:
    assert cli("lister", "register", "gitlab", "example").returncode == 0
    bad = cli(
        "origins",
        "import",
        "-",
        "--lister",
        "gitlab/example",
        stdin='{"url": "https://a.example/0", "visit_type": "svn/export"}\n',
    )
    assert bad.returncode == 2
    assert "line 1: visit_type: " in bad.stderr and "cannot name a visit type" in bad.stderr
    assert conn.execute("select count(*) as n from listed_origins").fetchone() == {"n": 0}
    result = cli(
        "origins",
        "import",
        "-",
        "--lister",
        "gitlab/example",
        stdin='{"url": "https://a.example/1", "visit_type": "cvs"}\n',
    )
    assert result.returncode == 0, result.stderr
    assert "visit type cvs created by a listing, paused" in result.stderr
    assert conn.execute("select count(*) as n from listed_origins").fetchone() == {"n": 1}
    row = conn.execute("select enabled from visit_types where name = 'cvs'").fetchone()
    assert row == {"enabled": False}


def test_flushdb_then_one_scheduler_iteration_restores_the_mirror(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    from actors.scheduler import SchedulerLoop

    list_origins(conn, ctx, URLS, now=NOW)
    schedule_step(conn, ctx, "git", 5, NOW)
    before = ctx.mirror.contents("git")
    ctx.mirror.client.flushdb()
    results = SchedulerLoop(settings).step(NOW)
    assert results[0].rebuilt
    after = ctx.mirror.contents("git")
    assert set(after) == set(before)
    assert check(conn, ctx, "git", NOW) == []
    assert len(results[0].orders) == sum(1 for p, _ in after.values() if p == "inflight") - 5
