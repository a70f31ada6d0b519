"""DESIGN invariants 1 and 2 under any interleaving of listings, journal updates,
scheduling and requests, against the real PostgreSQL and Redis."""

import contextlib
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.db.scheduling import visit_type_configs
from app.domain.cooldown import in_flight_since, request_window_s
from app.domain.journal_event import VisitStatusEvent
from app.domain.lanes import MAX_TIME_LIMIT_S
from app.domain.placement import epoch_s
from app.inputs.api import RequestVisit
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.listing import finish_listing, record_listed_origins, start_listing
from app.services.mirror_sync import LOST_VISIT_GRACE_S, check, ensure_built
from app.services.requests import (
    RequestError,
    cancel_request,
    create_request,
    release_request_origin,
    take_pending,
)
from app.services.scheduling import schedule_step

pytestmark = pytest.mark.every_mirror(sharded=True)

URLS = [f"https://h.example/{i}" for i in range(12)]
START = datetime(2026, 8, 1, tzinfo=UTC)
STATUSES = ["full", "partial", "failed", "not_found", "ongoing"]


def test_a_resting_origin_whose_requested_visit_is_lost_returns_to_its_pool_in_both(
    conn: DictConnection, ctx: Context
) -> None:
    # not_found rests it 31 days; a request sends it anyway; its visit never
    # reports, and past the scheduled cooldown it is presumed lost.
    url = "https://h.example/5"
    configs = visit_type_configs(conn)
    lister = register_lister(conn, "forge", "a", None)
    now = START
    apply_events_batch(
        conn, ctx, [VisitStatusEvent(url, "git", 1, now, "not_found", None)], configs, now
    )
    started = start_listing(conn, lister, now)
    listed = ListedOriginIn(url=url, visit_type="git", last_update=None)
    record_listed_origins(conn, ctx, lister, [(1, listed)], now)
    finish_listing(conn, ctx, lister, started, now, full=True)
    create_request(conn, RequestVisit(url=url, visit_type="git"), now=now)
    now += timedelta(seconds=1)
    assert [t.url for t in take_pending(conn, ctx, "git", 2, now)] == [url]
    assert check(conn, ctx, "git", now) == []

    now += ctx.cooldowns.scheduled + timedelta(days=1)

    assert check(conn, ctx, "git", now) == []
    assert [o.url for o in schedule_step(conn, ctx, "git", 1, now).orders] == [url]
    assert check(conn, ctx, "git", now) == []


def test_mirror_equals_postgres_after_any_interleaving(conn: DictConnection, ctx: Context) -> None:
    class Interleavings(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            conn.execute(
                "truncate origin_visit_stats, listed_origins, listers, "
                "visit_scheduler_queue_position, visit_requests cascade"
            )
            ctx.mirror.client.flushdb()
            self.now = START
            # Built from the start, as the scheduler builds it before it sends: a
            # first build later would take the visits sent meanwhile for lost with
            # Redis (unstarted) and return them early, which only a wipe should do.
            ensure_built(conn, ctx, "git", self.now)
            self.visit = 0
            self.listers = [register_lister(conn, "forge", name, None) for name in ("a", "b")]
            self.configs = visit_type_configs(conn)
            self.rng = random.Random(0)
            self.sent: list[int] = []
            self.wiped: set[str] = set()

        @rule(
            lister=st.integers(0, 1),
            picked=st.sets(st.sampled_from(URLS), max_size=8),
            days_ago=st.none() | st.integers(0, 30),
            full=st.booleans(),
        )
        def listing(self, lister: int, picked: set[str], days_ago: int | None, full: bool) -> None:
            update = None if days_ago is None else self.now - timedelta(days=days_ago)
            rows = [
                (i + 1, ListedOriginIn(url=u, visit_type="git", last_update=update))
                for i, u in enumerate(sorted(picked))
            ]
            started = start_listing(conn, self.listers[lister], self.now)
            if rows:
                record_listed_origins(conn, ctx, self.listers[lister], rows, self.now)
            finish_listing(conn, ctx, self.listers[lister], started, self.now, full=full)

        def in_flight(self, within: timedelta | None = None) -> set[str]:
            """The origins whose visit was sent and has not ended (nor been presumed
            lost), sent at most ``within`` ago if given."""
            rows = conn.execute(
                "select url, last_scheduled, last_final_date from origin_visit_stats"
            )
            cooldowns, now = ctx.cooldowns, self.now
            since = None if within is None else now - within
            return {
                str(r["url"])
                for r in rows
                if in_flight_since(r["last_scheduled"], r["last_final_date"], now, cooldowns)
                and (since is None or r["last_scheduled"] >= since)
            }

        @rule(slots=st.integers(0, 6))
        def schedule(self, slots: int) -> None:
            # (a visit sent when Redis was wiped, its message gone with it, is sent again)
            busy = self.in_flight() - self.wiped
            sent = [o.url for o in schedule_step(conn, ctx, "git", slots, self.now).orders]
            assert not busy & set(sent)  # one visit of an origin at a time

        @rule(picked=st.lists(st.sampled_from(URLS), min_size=1, max_size=3))
        def requests_sent(self, picked: list[str]) -> None:
            for url in picked:
                create_request(conn, RequestVisit(url=url, visit_type="git"), now=self.now)
            # sent after the statuses applied so far
            self.now += timedelta(seconds=1)
            # A request waits for a visit in flight only its own window: past it,
            # that visit is taken for lost and the request is sent.
            busy = self.in_flight(within=timedelta(seconds=request_window_s(MAX_TIME_LIMIT_S)))
            taken = take_pending(conn, ctx, "git", 2, self.now)
            sent = [t.url for t in taken]
            assert not busy & set(sent) and len(set(sent)) == len(sent)
            known = {str(r["url"]) for r in conn.execute("select url from origin_visit_stats")}
            assert set(sent) & known <= self.in_flight()
            self.sent += [t.id for t in taken]

        @rule(index=st.integers(0, 5))
        def sent_request_aborted(self, index: int) -> None:
            if self.sent:
                request_id = self.sent.pop(index % len(self.sent))
                with contextlib.suppress(RequestError):  # unless the journal ended it
                    cancel_request(
                        conn, ctx.redis, ctx.settings.redis_namespace, request_id, self.now
                    )
                release_request_origin(conn, ctx, request_id, self.now)

        @rule(
            picked=st.lists(st.sampled_from(URLS), min_size=1, max_size=4),
            status=st.sampled_from(STATUSES),
            snapshot=st.sampled_from([None, b"a" * 20, b"b" * 20]),
        )
        def journal(self, picked: list[str], status: str, snapshot: bytes | None) -> None:
            events = []
            for url in picked:
                self.visit += 1
                events.append(VisitStatusEvent(url, "git", self.visit, self.now, status, snapshot))
            apply_events_batch(conn, ctx, events, self.configs, self.now)

        @rule(hours=st.sampled_from([1, 13, 24 * 8, 24 * 40]))
        def time_passes(self, hours: int) -> None:
            self.now += timedelta(hours=hours)

        @rule()
        def redis_restarts_empty(self) -> None:
            before = ctx.mirror.contents("git")
            self.wiped |= self.in_flight()
            ctx.mirror.client.flushdb()
            ensure_built(conn, ctx, "git", self.now)
            # Rebuilt at the same instant: exactly what was there, except resting
            # origins whose rest ended (the rebuild puts them back in a pool),
            # and visits lost with Redis, which return after the grace.
            after = ctx.mirror.contents("git")
            assert set(after) == set(before)
            grace_back = (
                epoch_s(self.now) + LOST_VISIT_GRACE_S - ctx.cooldowns.scheduled.total_seconds()
            )
            sent = {
                int(r["id"]): epoch_s(r["last_scheduled"])
                for r in conn.execute("select id, last_scheduled from origin_visit_stats")
            }
            for origin, (place, score) in before.items():
                # A lost visit returns after the grace, counted from this wipe
                # (even if an earlier wipe had moved it already); one that has
                # started since (an ongoing status) waits its result again.
                returns = {min(sent[origin], grace_back), sent[origin]}
                if after[origin][0] == "inflight" and after[origin][1] in returns:
                    continue
                if after[origin] != (place, score):
                    assert place in ("cooling", "inflight")
                    assert after[origin][0] not in ("cooling", "inflight")

        @invariant()
        def mirror_matches_postgres(self) -> None:
            assert check(conn, ctx, "git", self.now) == []

    run_state_machine_as_test(
        Interleavings,
        settings=settings(
            max_examples=60,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
