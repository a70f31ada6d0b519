"""Two scheduler processes on the same visit types (issue 14): one lease per
visit type, so no queue overfills and no origin is sent twice, and the
survivor takes over when the holder is killed."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
import redis

from app.db.connection import DictConnection
from app.domain.lanes import LANES
from app.domain.placement import Placement
from app.domain.queue_names import first_visits_queue, lane_queue
from app.services.context import Context
from app.settings import Settings
from queues import keys
from queues.keys import DRAMATIQ_NAMESPACE
from queues.lease import LeaseLost, Leases
from tests.integration.helpers import list_origins
from tests.processes import running, wait_for, with_constants

BOUND = 6
FAST = with_constants(
    {"actors.scheduler.POLL_INTERVAL_S": 0.1, "actors.scheduler.LEASE_S": 2},
    {"REVISIT_METRICS_PORT": "0"},
)


def queues(settings: Settings) -> list[str]:
    return [lane_queue("git", lane) for lane in LANES] + [first_visits_queue("first", "git")]


def drain(client: redis.Redis, settings: Settings) -> tuple[list[int], int]:
    """Take every queued message away, as workers would: the origins they
    carried, and the deepest queue found."""
    ns = DRAMATIQ_NAMESPACE
    origins: list[int] = []
    deepest = 0
    for queue in queues(settings):
        dramatiq_keys = keys.DramatiqQueueKeys(ns, queue)
        pipe = client.pipeline(transaction=True)
        pipe.hgetall(dramatiq_keys.messages)
        pipe.delete(dramatiq_keys.messages, dramatiq_keys.waiting)
        messages = pipe.execute()[0]
        deepest = max(deepest, len(messages))
        origins += [json.loads(m)["kwargs"]["origin_id"] for m in messages.values()]
    return origins, deepest


def lease_holder_pid(ctx: Context, settings: Settings) -> int | None:
    holder = Leases(ctx.mirror.client, settings.redis_namespace, 1, "test").holder_of("git")
    return int(holder.rsplit(":", 1)[1]) if holder else None


@pytest.mark.every_mirror(sharded=True)
def test_two_schedulers_never_overfill_nor_send_twice_and_one_survives_the_other(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    list_origins(conn, ctx, [f"https://forge.example/s{i}.git" for i in range(300)])
    conn.execute("update visit_types set max_queue_length = %s where name = 'git'", [BOUND])
    sent: list[int] = []
    deepest = 0

    def refilled() -> bool:
        nonlocal deepest
        origins, depth = drain(ctx.redis, settings)
        sent.extend(origins)
        deepest = max(deepest, depth)
        return depth > 0

    commands = {name: ["revisit", "scheduler"] for name in ("scheduler_a", "scheduler_b")}
    with running(commands, FAST, tmp_path) as procs:
        wait_for(lambda: lease_holder_pid(ctx, settings) is not None, 30, "a lease", tmp_path)
        for _ in range(8):
            wait_for(refilled, 30, "the queues to be refilled", tmp_path)
        holder = lease_holder_pid(ctx, settings)
        assert holder in {p.pid for p in procs.values()}
        os.kill(holder, signal.SIGKILL)
        procs_left = [p.pid for p in procs.values() if p.pid != holder]
        wait_for(
            lambda: lease_holder_pid(ctx, settings) in procs_left,
            30,
            "the surviving scheduler to take the lease",
            tmp_path,
        )
        for _ in range(3):
            wait_for(refilled, 30, "the survivor to refill the queues", tmp_path)

    refilled()  # what the last step sent before the survivor stopped
    assert deepest <= BOUND
    twice = {origin: n for origin, n in Counter(sent).items() if n > 1}
    assert twice == {}
    in_flight = {o for o, (place, _) in ctx.mirror.contents("git").items() if place == "inflight"}
    assert set(sent) <= in_flight


@pytest.mark.every_mirror
def test_a_pop_fenced_with_a_token_that_lost_the_lease_moves_nothing(ctx: Context) -> None:
    ns = ctx.settings.redis_namespace
    ctx.mirror.place("git", [Placement(1, "pool", 1.0, "no_last_update", 1.0, 1)])
    stalled = Leases(ctx.mirror.client, ns, 0.05, "stalled:1")
    survivor = Leases(ctx.mirror.client, ns, 10, "survivor:2")
    old_token = stalled.hold("git")
    wait_for(lambda: survivor.hold("git") is not None, 5, "the lease to expire")
    ctx.mirror.fences["git"] = str(old_token)

    with pytest.raises(LeaseLost):
        ctx.mirror.pop("git", 1, 100.0, 3600.0)

    assert ctx.mirror.contents("git") == {1: ("no_last_update", 1.0)}
    ctx.mirror.fences["git"] = str(survivor.tokens["git"])
    assert [p.id for p in ctx.mirror.pop("git", 1, 100.0, 3600.0).popped] == [1]


@pytest.mark.every_mirror
def test_a_lease_given_back_is_taken_at_once_with_a_newer_token(ctx: Context) -> None:
    ns = ctx.settings.redis_namespace
    first = Leases(ctx.mirror.client, ns, 60, "first:1")
    second = Leases(ctx.mirror.client, ns, 60, "second:2")
    token = first.hold("git")
    assert second.hold("git") is None
    assert first.hold("git") == token

    first.release_all()

    newer = second.hold("git")
    assert newer is not None and int(newer) > int(str(token))
    assert second.holder_of("git") == "second:2"
