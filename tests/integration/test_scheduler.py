"""Scheduling steps against real PostgreSQL and Redis: policies, cooldowns,
dry runs, ETAs, and a scheduler dying between its pop and its enqueue."""

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import queues.mirror
from actors.scheduler import SchedulerLoop
from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.db.policies import set_policies
from app.db.scheduling import mark_scheduled, visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.domain.placement import Placement, epoch_s
from app.domain.queue_names import visit_queue
from app.inputs.listing import ListedOriginIn
from app.services import mirror_sync
from app.services.context import Context
from app.services.introspection import describe_origin
from app.services.journal import apply_events_batch
from app.services.listing import record_listed_origins
from app.services.mirror_sync import check, ensure_built
from app.services.scheduling import schedule_step
from app.settings import Settings
from queues.keys import DramatiqQueueKeys
from queues.lease import LeaseLost, Leases
from queues.mirror import Mirror
from tests.integration.helpers import list_origins, stats_by_url

NOW = datetime(2026, 11, 1, tzinfo=UTC)
URLS = [f"https://s.example/{i}" for i in range(20)]


def visited(conn: DictConnection, ctx: Context, urls: list[str], status: str, at: datetime) -> None:
    events = [
        VisitStatusEvent(u, "git", 1, at, status, b"x" * 20 if status == "full" else None)
        for u in urls
    ]
    apply_events_batch(conn, ctx, events, visit_type_configs(conn), at)


def test_visited_origin_is_not_picked_again_before_its_cooldown(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:2], now=NOW)
    first = schedule_step(conn, ctx, "git", 10, NOW)
    assert len(first.orders) == 2
    visited(conn, ctx, [URLS[0]], "full", NOW + timedelta(minutes=1))
    visited(conn, ctx, [URLS[1]], "failed", NOW + timedelta(minutes=1))
    done = NOW + timedelta(minutes=1)
    just_before = schedule_step(
        conn, ctx, "git", 10, done + ctx.cooldowns.absolute - timedelta(seconds=1)
    )
    assert just_before.orders == []
    after_absolute = schedule_step(conn, ctx, "git", 10, done + ctx.cooldowns.absolute)
    assert [o.url for o in after_absolute.orders] == [URLS[0]]
    rest = ctx.cooldowns.failed_rest(1)
    before_failed = schedule_step(conn, ctx, "git", 10, done + rest - timedelta(seconds=1))
    assert URLS[1] not in [o.url for o in before_failed.orders]
    after_failed = schedule_step(conn, ctx, "git", 10, done + rest)
    assert [o.url for o in after_failed.orders] == [URLS[1]]


def test_an_origin_failing_again_rests_twice_as_long(conn: DictConnection, ctx: Context) -> None:
    list_origins(conn, ctx, URLS[:1], now=NOW)
    assert len(schedule_step(conn, ctx, "git", 10, NOW).orders) == 1
    first = NOW + timedelta(minutes=1)
    visited(conn, ctx, URLS[:1], "failed", first)
    again = first + ctx.cooldowns.failed_rest(1)
    assert [o.url for o in schedule_step(conn, ctx, "git", 10, again).orders] == URLS[:1]
    second = again + timedelta(minutes=1)
    events = [VisitStatusEvent(URLS[0], "git", 2, second, "failed", None)]
    apply_events_batch(conn, ctx, events, visit_type_configs(conn), second)
    assert stats_by_url(conn)[URLS[0]]["failures_in_a_row"] == 2
    rest = ctx.cooldowns.failed_rest(2)
    assert rest == 2 * ctx.cooldowns.failed_rest(1) < ctx.cooldowns.failed
    early = schedule_step(conn, ctx, "git", 10, second + rest - timedelta(seconds=1))
    assert early.orders == []
    assert [o.url for o in schedule_step(conn, ctx, "git", 10, second + rest).orders] == URLS[:1]


def test_scheduler_dying_between_pop_and_enqueue_loses_no_origin(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    # The step records the pop in Redis and Postgres; the process then dies
    # before any message reaches Dramatiq.
    lost = schedule_step(conn, ctx, "git", 8, NOW)
    assert len(lost.orders) == 8 and ctx.mirror.sizes("git")["inflight"] == 8
    assert check(conn, ctx, "git", NOW) == []
    later = NOW + ctx.cooldowns.scheduled
    rest = schedule_step(conn, ctx, "git", 100, later)
    assert rest.lost == 8
    assert {o.url for o in rest.orders} == set(URLS)


def test_query_policies_pick_by_their_own_order(conn: DictConnection, ctx: Context) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    conn.execute(
        "update origin_visit_stats set last_scheduled = %s - make_interval(days => id::int)",
        (NOW - timedelta(days=30),),
    )
    from app.services.mirror_sync import rebuild

    rebuild(conn, ctx, "git", NOW)
    result = schedule_step(conn, ctx, "git", 3, NOW, {"oldest_scheduled_first": 1.0})
    ages = {u: r["last_scheduled"] for u, r in stats_by_url(conn).items()}
    oldest = sorted(a for a in ages.values() if a < NOW - timedelta(days=1))[:3]
    assert len(result.orders) == 3
    assert all(o.policy == "oldest_scheduled_first" for o in result.orders)
    assert sorted(ages[o.url] for o in result.orders if ages[o.url] < NOW) == [] or oldest


def test_oldest_scheduled_first_goes_on_past_more_resting_origins_than_a_page(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    conn.execute(
        "update origin_visit_stats set last_scheduled = %s - make_interval(days => id::int)",
        (NOW - timedelta(days=30),),
    )
    by_age = [
        str(r["url"])
        for r in conn.execute("select url from origin_visit_stats order by last_scheduled, id")
    ]
    # The 12 longest since scheduled were found gone an hour ago: they rest 31
    # days, more than the 9 candidates (3 a slot) a page of 3 slots reads.
    visited(conn, ctx, by_age[:12], "not_found", NOW - timedelta(hours=1))
    from app.services.mirror_sync import rebuild

    rebuild(conn, ctx, "git", NOW)
    result = schedule_step(conn, ctx, "git", 3, NOW, {"oldest_scheduled_first": 1.0})
    assert [(o.url, o.policy) for o in result.orders] == [
        (url, "oldest_scheduled_first") for url in by_age[12:15]
    ]


def test_dry_run_shows_the_picks_and_their_policy_without_taking_them(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    ensure_built(conn, ctx, "git", NOW)  # a dry run does not build a missing mirror
    set_policies(conn, "git", {"origins_without_last_update": 1.0})
    peek = schedule_step(
        conn, ctx, "git", 5, NOW, {"origins_without_last_update": 1.0}, dry_run=True
    )
    take = schedule_step(conn, ctx, "git", 5, NOW, {"origins_without_last_update": 1.0})
    assert [o.url for o in peek.orders] == [o.url for o in take.orders]
    assert {o.policy for o in peek.orders} == {"origins_without_last_update"}
    cli = subprocess.run(
        [sys.executable, "-m", "app", "schedule", "--dry-run", "git", "-n", "3"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.count("origins_without_last_update") == 3
    assert ctx.mirror.sizes("git")["inflight"] == 5


def test_origin_show_gives_an_eta_from_rank_and_pick_rate(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    ensure_built(conn, ctx, "git", NOW)  # as the scheduler's step does before it records
    ctx.mirror.record_pick_rates("git", {"no_last_update": 2.0})
    report = describe_origin(conn, ctx, URLS[-1], "git")[0]
    assert report["mirror_place"] == "no_last_update"
    rank = report["mirror_rank"]
    assert 0 <= rank < 20
    assert report["next_visit_eta"].startswith("about ")
    assert f"(rank {rank}, 2.00/s)" in report["next_visit_eta"]


def test_pick_rates_recorded_after_redis_lost_the_mirror_leave_it_to_be_rebuilt(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    assert ensure_built(conn, ctx, "git", NOW)
    ctx.mirror.client.flushdb()  # between a step's pop and its recording of the rates
    ctx.mirror.record_pick_rates("git", {"no_last_update": 2.0})
    assert not ctx.mirror.is_built("git")
    assert ensure_built(conn, ctx, "git", NOW)
    assert ctx.mirror.sizes("git")["no_last_update"] == len(URLS)


def test_first_visits_after_listing_go_through_the_listers_queue(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    from app.db.listings import register_lister
    from app.inputs.listing import ListedOriginIn
    from app.services.listing import finish_listing, record_listed_origins, start_listing

    # git alone: another visit type's step would find the lister done in this step.
    conn.execute("delete from scheduling_policies where visit_type <> 'git'")
    conn.execute("delete from visit_types where name <> 'git'")
    lister = register_lister(conn, "gitlab", "new-forge", "first")
    now = datetime.now(tz=UTC)
    started = start_listing(conn, lister, now)
    rows = [(i + 1, ListedOriginIn(url=u, visit_type="git")) for i, u in enumerate(URLS[:5])]
    record_listed_origins(conn, ctx, lister, rows, now)
    finish_listing(conn, ctx, lister, started, now, full=True)
    loop = SchedulerLoop(settings)
    loop.step(now + timedelta(seconds=1))
    client = loop.broker.client
    assert client.hlen(DramatiqQueueKeys("dramatiq", "first.visit.git").messages) == 5
    assert client.hlen(DramatiqQueueKeys("dramatiq", visit_queue("git")).messages) == 0
    done = conn.execute("select first_visits_scheduled_at from listers where id = %s", (lister,))
    assert done.fetchone() == {"first_visits_scheduled_at": None}
    loop.step(now + timedelta(seconds=2))
    done = conn.execute("select first_visits_scheduled_at from listers where id = %s", (lister,))
    assert done.fetchone()["first_visits_scheduled_at"] is not None


def test_origins_are_counted_per_pool_policy_and_lister(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    from monitoring.coverage import export_pools_by_lister

    list_origins(conn, ctx, URLS[:6], now=NOW)
    schedule_step(conn, ctx, "git", 2, NOW)
    counts = export_pools_by_lister(conn, NOW, ctx.cooldowns)
    assert counts == {
        ("test/forge", "git", "no_last_update", "age_optimal"): 4,
        ("test/forge", "git", "inflight", ""): 2,
    }


def test_marked_origins_come_back_in_the_order_picked_with_the_newest_listings_arguments(
    conn: DictConnection, ctx: Context
) -> None:
    old = register_lister(conn, "old", "forge", None)
    new = register_lister(conn, "new", "forge", None)
    urls = ["https://a.example/plain", "https://a.example/args", "https://a.example/stale"]
    record_listed_origins(
        conn,
        ctx,
        old,
        [
            (i + 1, ListedOriginIn(url=u, visit_type="git", extra_loader_arguments={"v": 1}))
            for i, u in enumerate(urls[1:])
        ],
        NOW,
    )
    later = [ListedOriginIn(url=urls[0], visit_type="git")]
    later += [ListedOriginIn(url=urls[1], visit_type="git", extra_loader_arguments={"v": 2})]
    later += [ListedOriginIn(url=urls[2], visit_type="git")]
    record_listed_origins(conn, ctx, new, list(enumerate(later, start=1)), NOW + timedelta(hours=1))
    ids = {str(r["url"]): int(r["id"]) for r in stats_by_url(conn).values()}
    picked = [ids[u] for u in (urls[1], urls[0], urls[2])]
    rows = mark_scheduled(conn, picked, NOW)
    assert [int(r["id"]) for r in rows] == picked
    arguments = {str(r["url"]): r["extra_loader_arguments"] for r in rows}
    # The most recently seen listing wins, even when it carries no arguments.
    assert arguments == {urls[0]: None, urls[1]: {"v": 2}, urls[2]: {}}


def test_a_failing_visit_type_does_not_stop_the_scheduling_of_the_others(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    from monitoring.metrics import SCHEDULER_STEP_FAILURES

    list_origins(conn, ctx, URLS[:3], "git", now=NOW)
    list_origins(conn, ctx, URLS[3:6], "hg", now=NOW)
    # A policy row no scheduler knows (written behind the CLI's back): git's step fails.
    conn.execute(
        "insert into scheduling_policies (visit_type, policy, weight) values ('git', 'bogus', 1)"
    )
    failures = SCHEDULER_STEP_FAILURES.labels("git")._value.get()
    loop = SchedulerLoop(settings)
    results = loop.step(NOW + timedelta(seconds=1))
    assert [r.visit_type for r in results] == ["hg", "svn"]  # every visit type of the table
    assert loop.broker.client.hlen(DramatiqQueueKeys("dramatiq", visit_queue("hg")).messages) == 3
    assert loop.broker.client.hlen(DramatiqQueueKeys("dramatiq", visit_queue("git")).messages) == 0
    assert SCHEDULER_STEP_FAILURES.labels("git")._value.get() == failures + 1


def test_the_scheduler_counts_a_rebuild_of_a_lost_mirror_and_its_duration(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    from monitoring.metrics import MIRROR_REBUILD_SECONDS, MIRROR_REBUILDS

    list_origins(conn, ctx, URLS, now=NOW)
    loop = SchedulerLoop(settings)
    loop.step(NOW + timedelta(seconds=1))
    rebuilds = MIRROR_REBUILDS.labels("git")._value.get()
    loop.step(NOW + timedelta(seconds=2))
    assert MIRROR_REBUILDS.labels("git")._value.get() == rebuilds  # built: nothing to do

    ctx.mirror.client.flushdb()  # Redis restarted empty
    [result] = [r for r in loop.step(NOW + timedelta(seconds=3)) if r.visit_type == "git"]

    assert result.rebuilt and result.rebuild_s > 0
    assert MIRROR_REBUILDS.labels("git")._value.get() == rebuilds + 1
    assert MIRROR_REBUILD_SECONDS.labels("git")._value.get() == result.rebuild_s
    assert check(conn, ctx, "git", NOW + timedelta(seconds=3)) == []


def short_lease_and_another_holder(
    settings: Settings, conn: DictConnection, ctx: Context
) -> tuple[SchedulerLoop, Leases]:
    """A scheduler on listed origins whose lease lasts 0.6 s, and another process
    that would take the lease the moment it lapsed."""
    list_origins(conn, ctx, URLS, now=NOW)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("actors.scheduler.LEASE_S", 0.6)
        loop = SchedulerLoop(settings)
    return loop, Leases(ctx.mirror.client, settings.redis_namespace, 60, "other:1")


def test_a_rebuild_longer_than_the_lease_keeps_it_and_the_step_pops_after_it(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, other = short_lease_and_another_holder(settings, conn, ctx)
    ctx.mirror.client.flushdb()  # Redis restarted empty: the step rebuilds
    taken_meanwhile: list[str | None] = []
    stage = Mirror.stage

    def slow_stage(self: Mirror, visit_type: str, placements: Iterable[Placement]) -> None:
        if visit_type != "git":  # the table's other visit types have no origin
            return stage(self, visit_type, placements)

        def slowly() -> Iterator[Placement]:
            for placement in placements:
                time.sleep(2.0 / len(URLS))  # over three times the lease in all
                yield placement
            taken_meanwhile.append(other.hold("git"))

        return stage(self, visit_type, slowly())

    monkeypatch.setattr(queues.mirror, "REBUILD_CHUNK", 1)
    monkeypatch.setattr(Mirror, "stage", slow_stage)
    # The step's pop after the rebuild is fenced with the token taken before
    # it: had the lease lapsed, it would be refused (LeaseLost, no result).
    [rebuilt] = [r for r in loop.step(NOW + timedelta(seconds=2)) if r.visit_type == "git"]

    assert rebuilt.rebuilt and taken_meanwhile == [None]
    assert other.holder_of("git") == loop.leases.holder
    assert len(rebuilt.orders) == len(URLS)


@pytest.mark.parametrize("phase", ["unstarted visits read", "touched origins drained"])
def test_a_rebuild_phase_that_writes_nothing_for_longer_than_the_lease_keeps_it(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    monkeypatch: pytest.MonkeyPatch,
    phase: str,
) -> None:
    loop, other = short_lease_and_another_holder(settings, conn, ctx)
    ctx.mirror.client.flushdb()  # Redis restarted empty: the step rebuilds
    taken_meanwhile: list[str | None] = []

    def slowly(call: Any, of_git: Callable[[Any], bool]) -> Any:
        def slow(*args: Any) -> Any:
            if of_git(args):  # the table's other visit types are rebuilt quickly
                time.sleep(2.0)  # over three times the lease, writing nothing
                taken_meanwhile.append(other.hold("git"))
            return call(*args)

        return slow

    if phase == "unstarted visits read":  # one query, before the first write
        monkeypatch.setattr(
            "app.services.mirror_sync.unstarted_ids",
            slowly(mirror_sync.unstarted_ids, lambda args: args[1] == "git"),
        )
    else:  # after the bulk writes, before the origins placed meanwhile are read
        client = loop.ctx.mirror.client
        monkeypatch.setattr(client, "spop", slowly(client.spop, lambda args: "{git}" in args[0]))
    [rebuilt] = [r for r in loop.step(NOW + timedelta(seconds=2)) if r.visit_type == "git"]

    assert rebuilt.rebuilt and taken_meanwhile and set(taken_meanwhile) == {None}
    assert other.holder_of("git") == loop.leases.holder
    assert len(rebuilt.orders) == len(URLS)


def test_a_rebuild_making_no_progress_for_long_lets_its_lease_lapse(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, other = short_lease_and_another_holder(settings, conn, ctx)
    ctx.mirror.client.flushdb()
    monkeypatch.setattr(queues.mirror, "REBUILD_MARKER_TTL_S", 1)
    taken_meanwhile: list[str | None] = []
    unstarted_ids = mirror_sync.unstarted_ids

    def stuck(conn: DictConnection, visit_type: str) -> set[int]:
        if visit_type == "git":
            time.sleep(3.0)  # a query that does not answer
            taken_meanwhile.append(other.hold("git"))
        return unstarted_ids(conn, visit_type)

    monkeypatch.setattr("app.services.mirror_sync.unstarted_ids", stuck)
    assert [r for r in loop.step(NOW + timedelta(seconds=2)) if r.visit_type == "git"] == []

    assert taken_meanwhile[0] is not None
    assert other.holder_of("git") == "other:1"


def test_a_step_stuck_outside_a_rebuild_lets_its_lease_lapse_for_another_scheduler(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, other = short_lease_and_another_holder(settings, conn, ctx)
    taken_meanwhile: list[str | None] = []

    def stuck(conn: DictConnection, config: Any, now: datetime, capacity: Any) -> Any:
        time.sleep(2.0)  # a call that does not answer
        taken_meanwhile.append(other.hold("git"))
        raise LeaseLost("gave up")

    monkeypatch.setattr(loop, "visit_type_step", stuck)
    assert loop.step(NOW + timedelta(seconds=2)) == []

    assert taken_meanwhile[0] is not None
    assert other.holder_of("git") == "other:1"


def test_a_visit_type_a_listing_created_is_counted_but_not_scheduled_until_enabled(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    from app.services.visit_types import VisitTypeChange, set_visit_type
    from monitoring.metrics import MIRROR_ORIGINS, VISIT_TYPE_PAUSED

    lister = register_lister(conn, "maven", "central", None)
    rows = [(i + 1, ListedOriginIn(url=u, visit_type="maven")) for i, u in enumerate(URLS[:3])]
    record_listed_origins(conn, ctx, lister, rows, NOW)
    maven = DramatiqQueueKeys("dramatiq", visit_queue("maven")).messages
    loop = SchedulerLoop(settings)
    results = loop.step(NOW + timedelta(seconds=1))
    assert "maven" not in [r.visit_type for r in results]
    assert loop.broker.client.hlen(maven) == 0
    assert VISIT_TYPE_PAUSED.labels("maven")._value.get() == 1
    assert MIRROR_ORIGINS.labels("maven", "no_last_update")._value.get() == 3
    set_visit_type(conn, VisitTypeChange(name="maven", enabled=True))
    enabled = SchedulerLoop(settings)  # reads the table afresh (a running one within 30 s)
    enabled.step(NOW + timedelta(seconds=2))
    assert enabled.broker.client.hlen(maven) == 3
    assert VISIT_TYPE_PAUSED.labels("maven")._value.get() == 0


def test_a_batch_the_broker_refused_is_sent_at_the_next_step(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    import actors.scheduler

    list_origins(conn, ctx, URLS[:5], "git", now=NOW)
    real_enqueue = actors.scheduler.enqueue_many
    calls = []

    def restarting_broker(broker: Any, messages: Any) -> Any:
        calls.append(len(messages))
        if len(calls) == 1:
            raise redis.ConnectionError("the broker is restarting")
        return real_enqueue(broker, messages)

    monkeypatch.setattr(actors.scheduler, "enqueue_many", restarting_broker)
    loop = SchedulerLoop(settings)
    express = DramatiqQueueKeys("dramatiq", visit_queue("git"))
    with pytest.raises(redis.ConnectionError):
        loop.step(NOW + timedelta(seconds=1))
    assert calls == [5] and loop.broker.client.hlen(express.messages) == 0
    assert ctx.mirror.sizes("git")["inflight"] == 5  # popped and stamped, not sent

    loop.step(NOW + timedelta(seconds=2))
    messages = loop.broker.client.hvals(express.messages)
    assert sorted(json.loads(m)["kwargs"]["url"] for m in messages) == sorted(URLS[:5])
    assert check(conn, ctx, "git", NOW + timedelta(seconds=2)) == []


@pytest.mark.every_mirror(sharded=True)
def test_origins_a_dead_scheduler_popped_but_never_sent_return_after_the_grace(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    import actors.scheduler

    list_origins(conn, ctx, URLS[:5], "git", now=NOW)
    real_enqueue = actors.scheduler.enqueue_many

    def dying(broker: Any, messages: Any) -> Any:
        raise redis.ConnectionError("the scheduler dies before its enqueue")

    monkeypatch.setattr(actors.scheduler, "enqueue_many", dying)
    dead = SchedulerLoop(settings)
    with pytest.raises(redis.ConnectionError):
        dead.step(NOW + timedelta(seconds=1))
    dead.leases.release_all()  # as its leases expire
    monkeypatch.setattr(actors.scheduler, "enqueue_many", real_enqueue)
    # The one whose visit started (its created status applied) is not lost.
    visited(conn, ctx, URLS[:1], "created", NOW + timedelta(seconds=2))
    restarted = SchedulerLoop(settings)  # the dead one's unsent batch died with it
    express = DramatiqQueueKeys("dramatiq", visit_queue("git"))

    def sent() -> list[str]:
        messages = restarted.broker.client.hvals(express.messages)
        return sorted(json.loads(m)["kwargs"]["url"] for m in messages)

    grace = mirror_sync.LOST_VISIT_GRACE_S
    restarted.step(NOW + timedelta(seconds=3))
    assert sent() == [] and ctx.mirror.sizes("git")["inflight"] == 5  # within the grace
    restarted.step(NOW + timedelta(seconds=grace + 3))  # found: back after another grace
    assert sent() == []
    restarted.step(NOW + timedelta(seconds=2 * grace + 5))
    assert sent() == sorted(URLS[1:5])
    assert check(conn, ctx, "git", NOW + timedelta(seconds=2 * grace + 5)) == []
    # Sent again and held by the broker (no worker runs): never returned again.
    restarted.step(NOW + timedelta(seconds=3 * grace + 10))
    restarted.step(NOW + timedelta(seconds=4 * grace + 20))
    assert sent() == sorted(URLS[1:5]) and ctx.mirror.sizes("git")["inflight"] == 5


@pytest.mark.every_mirror
def test_visits_a_broker_restart_lost_are_sent_again_after_the_grace(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:3], "git", now=NOW)
    loop = SchedulerLoop(settings)
    express = DramatiqQueueKeys("dramatiq", visit_queue("git"))

    def sent() -> list[str]:
        messages = loop.broker.client.hvals(express.messages)
        return sorted(json.loads(m)["kwargs"]["url"] for m in messages)

    loop.step(NOW + timedelta(seconds=1))
    assert sent() == sorted(URLS[:3])
    loop.broker.client.delete(express.messages, express.waiting)  # restarted empty
    grace = mirror_sync.LOST_VISIT_GRACE_S
    loop.step(NOW + timedelta(seconds=grace + 3))
    assert sent() == []
    loop.step(NOW + timedelta(seconds=2 * grace + 5))
    assert sent() == sorted(URLS[:3])
    assert check(conn, ctx, "git", NOW + timedelta(seconds=2 * grace + 5)) == []


@pytest.mark.every_mirror
def test_origins_popped_by_a_scheduler_that_died_before_stamping_them_go_back_after_the_grace(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS[:3], "git", now=NOW)
    ensure_built(conn, ctx, "git", NOW)
    cooldown_s = ctx.cooldowns.scheduled.total_seconds()
    popped = ctx.mirror.pop("git", 3, epoch_s(NOW), cooldown_s, "due").popped
    assert len(popped) == 3  # in flight in Redis; the process died: nothing in Postgres
    loop = SchedulerLoop(settings)
    express = DramatiqQueueKeys("dramatiq", visit_queue("git"))
    grace = mirror_sync.LOST_VISIT_GRACE_S
    loop.step(NOW + timedelta(seconds=grace + 1))  # found: back in its pool
    loop.step(NOW + timedelta(seconds=grace + 2))
    messages = loop.broker.client.hvals(express.messages)
    assert sorted(json.loads(m)["kwargs"]["url"] for m in messages) == sorted(URLS[:3])
    assert check(conn, ctx, "git", NOW + timedelta(seconds=grace + 2)) == []
