"""A mirror key of the wrong type, or a pool member that is no stats id (a
hand-made mistake in redis-cli): `mirror check` reports it in one line,
`mirror repair` and `mirror rebuild` fix it, `status` and `schedule
--dry-run` say it instead of dying with a traceback."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from app.db.connection import DictConnection
from app.services.context import Context
from app.services.mirror_sync import check, rebuild
from app.settings import Settings
from queues.keys import VisitTypeKeys
from tests.integration.helpers import cli, list_origins, pool_buckets

URLS = [f"https://c.example/{i}" for i in range(6)]


def keys(settings: Settings) -> VisitTypeKeys:
    return VisitTypeKeys(settings.redis_namespace, "git")


def pool_of_wrong_type(ctx: Context, k: VisitTypeKeys) -> str:
    index = k.pool_index(ctx.mirror.generation(k), "never_visited")
    ctx.redis.delete(index)
    ctx.redis.set(index, "oops")
    return index


def meta_of_wrong_type(ctx: Context, k: VisitTypeKeys) -> str:
    ctx.redis.delete(k.meta)
    ctx.redis.rpush(k.meta, "oops")
    return k.meta


def member_not_an_id(ctx: Context, k: VisitTypeKeys) -> str:
    [bucket, *_] = pool_buckets(ctx.mirror, "git", "no_last_update")
    ctx.redis.zadd(bucket, {"not-an-id": 1.0})
    return bucket


CORRUPTIONS: dict[str, Callable[[Context, VisitTypeKeys], str]] = {
    "pool of the wrong type": pool_of_wrong_type,
    "meta of the wrong type": meta_of_wrong_type,
    "a pool member that is no id": member_not_an_id,
}


@pytest.fixture(params=sorted(CORRUPTIONS))
def corrupt(
    request: pytest.FixtureRequest, settings: Settings, conn: DictConnection, ctx: Context
) -> str:
    """Six origins mirrored (and the mirror marked built), then one corruption;
    the key it hit."""
    list_origins(conn, ctx, URLS)
    rebuild(conn, ctx, "git", datetime.now(tz=UTC))
    return CORRUPTIONS[request.param](ctx, keys(settings))


def no_traceback(result: object) -> None:
    assert "Traceback" not in result.stderr, result.stderr  # type: ignore[attr-defined]


def test_mirror_check_reports_a_corrupt_key_in_one_line(corrupt: str) -> None:
    result = cli("mirror", "check", "git")
    no_traceback(result)
    assert result.returncode == 1
    [line] = [x for x in result.stdout.splitlines() if corrupt in x]
    assert "revisit mirror repair" in line


@pytest.mark.parametrize(("command", "says"), [("repair", ""), ("rebuild", "6 origins mirrored")])
def test_mirror_repair_and_rebuild_fix_a_corrupt_key(
    corrupt: str, conn: DictConnection, ctx: Context, command: str, says: str
) -> None:
    result = cli("mirror", command, "git")
    no_traceback(result)
    assert result.returncode == 0, result.stdout
    assert says in result.stdout
    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []
    assert cli("mirror", "check", "git").returncode == 0


def test_status_and_a_dry_run_name_a_key_of_the_wrong_type_instead_of_a_traceback(
    corrupt: str, request: pytest.FixtureRequest
) -> None:
    status = cli("status", "--once")
    dry_run = cli("schedule", "--dry-run", "git")
    no_traceback(status)
    no_traceback(dry_run)
    assert status.returncode == 0
    if "wrong type" in request.node.callspec.params["corrupt"]:
        assert f"git: the mirror holds {corrupt}: a " in status.stdout
        assert dry_run.returncode == 1
        assert f"error: git: the mirror holds {corrupt}: a " in dry_run.stderr
        assert "`revisit mirror repair`" in dry_run.stderr
    else:  # a member that is no id is skipped (`mirror check` names it)
        assert dry_run.returncode == 0
        assert len(dry_run.stdout.split("https://c.example/")) == 7
