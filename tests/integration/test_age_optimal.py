"""The age_optimal policy against real PostgreSQL and Redis: the journal learns
rates and plans targets, the scheduler measures capacity and re-solves μ."""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.db.policies import set_policies
from app.db.scheduling import visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.listing import record_listed_origins
from app.services.scheduling import schedule_step
from tests.integration.helpers import cli, list_origins, stats_by_url

NOW = datetime(2026, 11, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def _visit(
    conn: DictConnection, ctx: Context, url: str, visit: int, at: datetime, snapshot: bytes
) -> None:
    event = VisitStatusEvent(url, "git", visit, at, "full", snapshot)
    apply_events_batch(conn, ctx, [event], visit_type_configs(conn), at)


def test_rates_are_learned_from_visits_and_plan_the_next_target(
    conn: DictConnection, ctx: Context
) -> None:
    set_policies(conn, "git", {"age_optimal": 1.0})
    conn.execute("update visit_types set age_multiplier_s2 = %s where name = 'git'", (1e10,))
    busy, quiet = "https://a.example/busy", "https://a.example/quiet"
    list_origins(conn, ctx, [busy, quiet], now=NOW)
    for k in range(6):
        at = NOW + k * DAY
        _visit(conn, ctx, busy, k + 1, at, bytes([k]) * 20)  # changed every day
        _visit(conn, ctx, quiet, k + 1, at, b"q" * 20)  # never changed
    stats = stats_by_url(conn)
    busy_rate, quiet_rate = stats[busy]["change_rate_per_day"], stats[quiet]["change_rate_per_day"]
    assert isinstance(busy_rate, float) and isinstance(quiet_rate, float)
    assert busy_rate > 0.5 > 0.1 > quiet_rate
    last = NOW + 5 * DAY
    busy_wait = stats[busy]["next_visit_queue_position"] - last  # type: ignore[operator]
    quiet_wait = stats[quiet]["next_visit_queue_position"] - last  # type: ignore[operator]
    # Fast changers share the interval sqrt(2 mu) (1.6 days here, +-10 % fudge).
    assert timedelta(days=1.3) < busy_wait < timedelta(days=1.9)
    assert quiet_wait > 1.5 * busy_wait


def test_the_scheduler_sets_the_multiplier_from_the_capacity_it_measured(
    conn: DictConnection, ctx: Context
) -> None:
    set_policies(conn, "git", {"age_optimal": 1.0})
    urls = [f"https://b.example/{i}" for i in range(40)]
    list_origins(conn, ctx, urls, now=NOW)
    assert visit_type_configs(conn)["git"].age_multiplier_s2 is None
    policies = {"age_optimal": 1.0}
    schedule_step(conn, ctx, "git", 5, NOW, policies)  # starts counting picks
    interval = timedelta(seconds=ctx.tuning.allocation_interval_s)
    schedule_step(conn, ctx, "git", 5, NOW + interval / 2, policies)
    later = schedule_step(conn, ctx, "git", 5, NOW + interval, policies)
    assert len(later.orders) == 5
    config = visit_type_configs(conn)["git"]
    assert config.measured_capacity_per_day is not None
    # 10 picks (the last step's are counted after its refresh) in one interval.
    assert math.isclose(
        config.measured_capacity_per_day, 10 / interval.total_seconds() * 86400, rel_tol=1e-6
    )
    assert config.age_multiplier_s2 is not None and config.age_multiplier_s2 > 0


def test_the_typical_visit_cost_is_measured_with_the_first_multiplier_and_then_kept(
    conn: DictConnection, ctx: Context
) -> None:
    set_policies(conn, "git", {"age_optimal": 1.0})
    urls = [f"https://c.example/{i}" for i in range(25)]
    list_origins(conn, ctx, urls, now=NOW)
    for i, url in enumerate(urls):
        cost = 10.0 * (i + 1)  # uneventful visits of origin i take 10 (i + 1) s
        events = [
            VisitStatusEvent(
                url, "git", k + 1, NOW - (4 - k) * DAY, "full", b"s" * 20, {"duration_s": cost}
            )
            for k in range(4)
        ]
        apply_events_batch(conn, ctx, events, visit_type_configs(conn), NOW)
    assert visit_type_configs(conn)["git"].visit_cost_reference_s is None
    policies = {"age_optimal": 1.0}
    interval = timedelta(seconds=ctx.tuning.allocation_interval_s)
    schedule_step(conn, ctx, "git", 5, NOW, policies)
    schedule_step(conn, ctx, "git", 5, NOW + interval, policies)
    config = visit_type_configs(conn)["git"]
    assert config.age_multiplier_s2 is not None
    assert config.visit_cost_reference_s == 130.0  # the median of 10, 20 ... 250 s
    # a later allocation keeps it, whatever the visits cost since
    for url in urls:
        events = [
            VisitStatusEvent(
                url, "git", k + 5, NOW + k * DAY, "full", b"s" * 20, {"duration_s": 1e3}
            )
            for k in range(4)
        ]
        apply_events_batch(conn, ctx, events, visit_type_configs(conn), NOW + 4 * DAY)
    schedule_step(conn, ctx, "git", 5, NOW + 4 * DAY + interval, policies)
    assert visit_type_configs(conn)["git"].visit_cost_reference_s == 130.0


def test_targets_are_replanned_when_the_multiplier_moves_and_the_mirror_follows(
    conn: DictConnection, ctx: Context
) -> None:
    set_policies(conn, "git", {"age_optimal": 1.0})
    conn.execute("update visit_types set age_multiplier_s2 = %s where name = 'git'", (1e10,))
    urls = [f"https://c.example/{i}" for i in range(30)]
    list_origins(conn, ctx, urls, now=NOW)
    for k in range(4):
        for i, url in enumerate(urls):
            _visit(conn, ctx, url, k + 1, NOW + k * DAY, bytes([k, i % 2]) * 10)
    before = {u: s["next_visit_queue_position"] for u, s in stats_by_url(conn).items()}
    # The capacity fell: μ is now a hundred times larger (as a refresh would set it).
    conn.execute("update visit_types set age_multiplier_s2 = %s where name = 'git'", (1e12,))
    schedule_step(conn, ctx, "git", 0, NOW + 4 * DAY, {"age_optimal": 1.0})
    after = stats_by_url(conn)
    moved = [u for u in urls if after[u]["next_visit_queue_position"] != before[u]]
    assert len(moved) == len(urls)
    assert all(after[u]["next_visit_queue_position"] > before[u] for u in urls)  # type: ignore[operator]
    # Redis holds the new targets as the pool scores of the re-planned origins.
    contents = ctx.mirror.contents("git")
    in_pools = 0
    for url in urls:
        row = after[url]
        place, score = contents[int(row["id"])]  # type: ignore[call-overload]
        if place in ("no_last_update", "up_to_date"):
            in_pools += 1
            target = row["next_visit_queue_position"]
            assert score == target.timestamp()  # type: ignore[union-attr]
    assert in_pools == len(urls)  # out of their cooldown, every one waits in a pool


def test_the_schedule_drift_is_how_late_the_first_planned_origin_left_waiting_is(
    conn: DictConnection, ctx: Context
) -> None:
    set_policies(conn, "git", {"age_optimal": 1.0})
    urls = [f"https://d.example/{i}" for i in range(8)]
    list_origins(conn, ctx, urls, now=NOW)
    policies = {"age_optimal": 1.0}
    later = NOW + 3 * DAY
    # 8 new origins due since their listing, 3 slots: 5 are left waiting, overdue
    step = schedule_step(conn, ctx, "git", 3, later, policies)
    assert len(step.orders) == 3
    heads = [ctx.mirror.head_score("git", pool) for pool in ("no_last_update", "up_to_date")]
    waiting = min(h for h in heads if h is not None)
    assert step.schedule_drift_s == later.timestamp() - waiting
    assert step.schedule_drift_s > 2 * 86400
    # every origin taken: nothing waits, no drift to report
    rest = schedule_step(conn, ctx, "git", 10, later + timedelta(seconds=1), policies)
    assert len(rest.orders) == 5
    assert rest.schedule_drift_s is None


def test_a_reported_change_waits_in_lagging_until_its_delay_which_the_sweep_replans(
    conn: DictConnection, ctx: Context
) -> None:
    set_policies(conn, "git", {"age_optimal": 1.0})
    conn.execute("update visit_types set age_multiplier_s2 = %s where name = 'git'", (1e7,))
    url = "https://e.example/reported"
    lister = register_lister(conn, "test", "forge", None)

    def listing(last_update: datetime, at: datetime) -> None:
        row = ListedOriginIn(url=url, visit_type="git", last_update=last_update)
        record_listed_origins(conn, ctx, lister, [(1, row)], at)

    listing(NOW - 10 * DAY, NOW - DAY)
    for k in range(4):  # four visits a day apart, each finding a change
        _visit(conn, ctx, url, k + 1, NOW + k * DAY, bytes([k]) * 20)
    delay = stats_by_url(conn)[url]["reported_change_delay_s"]
    assert isinstance(delay, float) and 0 < delay < 86400
    # the forge reports a change after the last visit: lagging, due at its delay
    listing(NOW + 3.5 * DAY, NOW + 4 * DAY)
    stats = stats_by_url(conn)[url]
    place, score = ctx.mirror.contents("git")[int(stats["id"])]  # type: ignore[call-overload]
    assert place == "lagging"
    rate = stats["change_rate_per_day"]
    assert isinstance(rate, float) and rate > 0
    first_missed = min((NOW + 3.5 * DAY).timestamp(), (NOW + 3 * DAY).timestamp() + 86400 / rate)
    assert score == pytest.approx(first_missed + delay)
    # μ ten thousand times larger (under the cap: sqrt(2 μ) is 5.2 days, under
    # the 6.4 of the bound): the sweep re-plans the delay, the mirror follows,
    # and a known change still waits at most min_interval (12 h here), where
    # the guesses' μ alone would plan days
    conn.execute("update visit_types set age_multiplier_s2 = %s where name = 'git'", (1e11,))
    schedule_step(conn, ctx, "git", 0, NOW + 4 * DAY, {"age_optimal": 1.0})
    replanned = stats_by_url(conn)[url]["reported_change_delay_s"]
    assert isinstance(replanned, float) and 10 * delay < replanned <= 12 * 3600
    place, score = ctx.mirror.contents("git")[int(stats["id"])]  # type: ignore[call-overload]
    assert (place, score) == ("lagging", pytest.approx(first_missed + replanned))
    # an operator sees the delay
    shown = re.search(r"reported_change_delay_s\s+│ (\S+)", cli("origin", "show", url).stdout)
    assert shown is not None and float(shown.group(1)) == pytest.approx(replanned, rel=1e-3)


def test_under_overload_a_reported_change_goes_before_a_floor_visit_due_earlier(
    conn: DictConnection, ctx: Context
) -> None:
    set_policies(conn, "git", {"age_optimal": 1.0})
    floor_s = 0.9 * 64 * 86400  # max_interval less the margin
    # the multiplier's clamp, where an overloaded visit type ends up
    conn.execute(
        "update visit_types set age_multiplier_s2 = %s where name = 'git'", (floor_s**2 / 2,)
    )
    reported, planned = "https://o.example/reported", "https://o.example/planned"
    lister = register_lister(conn, "test", "forge", None)

    def listing(last_update: datetime, at: datetime) -> None:
        rows = [
            (1, ListedOriginIn(url=reported, visit_type="git", last_update=last_update)),
            (2, ListedOriginIn(url=planned, visit_type="git")),
        ]
        record_listed_origins(conn, ctx, lister, rows, at)

    listing(NOW - 50 * DAY, NOW - 41 * DAY)
    for k in range(4):  # nothing ever changes: both are planned at the floor
        _visit(conn, ctx, planned, k + 1, NOW - 40 * DAY + k * DAY, b"p" * 20)
        _visit(conn, ctx, reported, k + 1, NOW + k * DAY, b"r" * 20)
    floor_due = stats_by_url(conn)[planned]["next_visit_queue_position"]
    assert isinstance(floor_due, datetime) and floor_due < NOW + 21 * DAY
    # the forge reports a change a day after the last visit
    listing(NOW + 4 * DAY, NOW + 5 * DAY)
    stats = stats_by_url(conn)[reported]
    place, score = ctx.mirror.contents("git")[int(stats["id"])]  # type: ignore[call-overload]
    assert place == "lagging"
    assert score <= (NOW + 4 * DAY).timestamp() + (64 * 86400 - floor_s)  # within the bound
    # three weeks on, both are overdue: the known change goes first
    step = schedule_step(conn, ctx, "git", 1, NOW + 21 * DAY, {"age_optimal": 1.0})
    assert [order.url for order in step.orders] == [reported]


def _overloaded_forge(conn: DictConnection) -> uuid.UUID:
    """age_optimal on git with μ at its clamp (the capacity pays for no more than
    the floor: the workers cannot follow every reported change), and a forge's
    lister to list with."""
    set_policies(conn, "git", {"age_optimal": 1.0})
    floor_s = 0.9 * 64 * 86400
    conn.execute(
        "update visit_types set age_multiplier_s2 = %s where name = 'git'", (floor_s**2 / 2,)
    )
    return register_lister(conn, "test", "forge", None)


def test_under_overload_an_origin_that_stopped_changing_goes_before_one_that_keeps_changing(
    conn: DictConnection, ctx: Context
) -> None:
    lister = _overloaded_forge(conn)
    busy, quiet = "https://q.example/busy", "https://q.example/quiet"

    def listing(busy_at: datetime, quiet_at: datetime, at: datetime) -> None:
        rows = [
            (1, ListedOriginIn(url=busy, visit_type="git", last_update=busy_at)),
            (2, ListedOriginIn(url=quiet, visit_type="git", last_update=quiet_at)),
        ]
        record_listed_origins(conn, ctx, lister, rows, at)

    listing(NOW - 10 * DAY, NOW - 10 * DAY, NOW - DAY)
    for k in range(6):  # the busy origin changed at every visit, the quiet one never
        _visit(conn, ctx, busy, k + 1, NOW + k * DAY, bytes([k]) * 20)
        _visit(conn, ctx, quiet, k + 1, NOW + k * DAY, b"q" * 20)
    # the busy one went on changing (its first missed change about a day after
    # its last visit); the quiet one changed once, ten days after its last visit
    listing(NOW + 19.9 * DAY, NOW + 15 * DAY, NOW + 20 * DAY)
    step = schedule_step(conn, ctx, "git", 1, NOW + 30 * DAY, {"age_optimal": 1.0})
    # one visit brings the quiet one up to date; the busy one waits
    assert [order.url for order in step.orders] == [quiet]
    # an operator sees the delay, and that it counts from the latest change
    stored = stats_by_url(conn)[quiet]["reported_change_delay_s"]
    assert isinstance(stored, float) and stored < 0
    shown = re.search(
        r"reported_change_delay_s\s+│ (\S+) \(quiet-first\)", cli("origin", "show", quiet).stdout
    )
    assert shown is not None and float(shown.group(1)) == pytest.approx(-stored, rel=1e-3)


def test_past_the_cap_on_mu_a_reported_change_goes_before_a_useless_floor_visit_due_earlier(
    conn: DictConnection, ctx: Context
) -> None:
    lister = _overloaded_forge(conn)
    floor_s = 0.9 * 64 * 86400
    unchanged, changed = "https://u.example/unchanged", "https://u.example/changed"

    def listing(changed_at: datetime, at: datetime) -> None:
        rows = [
            (1, ListedOriginIn(url=unchanged, visit_type="git", last_update=NOW - 60 * DAY)),
            (2, ListedOriginIn(url=changed, visit_type="git", last_update=changed_at)),
        ]
        record_listed_origins(conn, ctx, lister, rows, at)

    listing(NOW - 60 * DAY, NOW - 52 * DAY)
    for k in range(4):  # nothing changes: both planned at the floor
        _visit(conn, ctx, unchanged, k + 1, NOW - 51 * DAY + k * DAY, b"u" * 20)
        _visit(conn, ctx, changed, k + 1, NOW + k * DAY, b"c" * 20)
    floor_due = stats_by_url(conn)[unchanged]["next_visit_queue_position"]
    assert isinstance(floor_due, datetime) and floor_due < NOW + 10 * DAY
    listing(NOW + 15 * DAY, NOW + 16 * DAY)  # the forge reports a change of the other
    # the floor visit is overdue, the reported change due after it; the forge
    # says the floor visit would find nothing, so the reported change goes first
    at = NOW + 22 * DAY

    def first_with(mu: float) -> list[str]:
        conn.execute("update visit_types set age_multiplier_s2 = %s where name = 'git'", (mu,))
        step = schedule_step(conn, ctx, "git", 1, at, {"age_optimal": 1.0}, dry_run=True)
        return [order.url for order in step.orders]

    schedule_step(conn, ctx, "git", 0, at, {"age_optimal": 1.0})  # back from cooling
    assert first_with(floor_s**2 / 2) == [changed]  # μ at its clamp
    # μ under its clamp but past the cap of known changes (sqrt(2 μ) = 33 days,
    # past the 6.4 of the bound): the workers still cannot follow every change
    assert first_with(floor_s**2 / 3) == [changed]
    # under the cap (the workers follow every reported change), the floor
    # visit goes first, in the order the visits fell due
    bound_s = 64 * 86400 - floor_s
    assert first_with(bound_s**2 / 2 * 0.9) == [unchanged]
