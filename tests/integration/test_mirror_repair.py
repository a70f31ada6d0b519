"""`revisit mirror check` on a consistent snapshot, by URL; `mirror repair` fixes what it finds."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from app.db.connection import DictConnection
from app.services.context import Context
from app.services.mirror_sync import check, check_settled, rebuild
from tests.integration.helpers import bucket_of, cli, list_origins, pool_members, stats_by_url

pytestmark = pytest.mark.every_mirror

NOW = datetime(2026, 11, 1, tzinfo=UTC)
URLS = [f"https://repair.example/{i}.git" for i in range(4)]


def test_an_origin_in_two_places_is_reported_by_url_and_repaired(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    rebuild(conn, ctx, "git", NOW)
    keys = ctx.mirror.keys("git")
    twice = int(str(stats_by_url(conn)[URLS[0]]["id"]))
    missing = int(str(stats_by_url(conn)[URLS[1]]["id"]))
    ctx.mirror.client.zadd(keys.inflight, {str(twice): 1.0})
    ctx.mirror.client.zrem(bucket_of(ctx.mirror, "git", "no_last_update", missing), str(missing))

    found = cli("mirror", "check", "git")
    assert found.returncode == 1, found.stderr
    assert (
        f"{URLS[0]} (id {twice}): expected no_last_update, mirror has no_last_update and inflight"
        in found.stdout
    )
    assert f"{URLS[1]} (id {missing}): expected no_last_update, mirror has nothing" in found.stdout

    repaired = cli("mirror", "repair", "git")
    assert repaired.returncode == 0, repaired.stderr
    assert "git: 2 origin(s) repaired" in repaired.stdout
    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []
    assert cli("mirror", "check", "git").returncode == 0
    assert ctx.mirror.sizes("git")["no_last_update"] == len(URLS)


def test_a_difference_that_resolves_within_the_settling_time_is_not_reported(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    rebuild(conn, ctx, "git", NOW)
    moving = pool_members(ctx.mirror, "git", "no_last_update")[0]
    pool = bucket_of(ctx.mirror, "git", "no_last_update", int(moving[0]))
    ctx.mirror.client.zrem(pool, moving[0])  # as if another process were moving it
    threading.Timer(0.2, lambda: ctx.mirror.client.zadd(pool, {moving[0]: moving[1]})).start()
    assert len(check(conn, ctx, "git", NOW)) == 1
    assert check_settled(conn, ctx, "git", lambda: NOW, settle_s=1.5) == []
