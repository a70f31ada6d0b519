"""Which visit ends a request sent to the archive's loaders (they number their
visits: the request's is the first created after it was sent), and a request
whose visit never reports (sent again at its deadline), against real
PostgreSQL and Redis."""

from datetime import UTC, datetime, timedelta

import pytest

from app.db.connection import DictConnection
from app.db.scheduling import VisitTypeConfig, visit_type_configs
from app.domain.cooldown import request_window_s
from app.domain.journal_event import VisitStatusEvent
from app.inputs.api import RequestVisit
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.mirror_sync import check, ensure_built
from app.services.requests import create_request, requests_past_deadline, take_pending
from app.services.scheduler_step import Send, plan_step
from tests.integration.helpers import list_origins

NOW = datetime(2026, 11, 20, tzinfo=UTC)
URL = "https://own-visit.example/repo"


def request(conn: DictConnection, request_id: int) -> tuple[str, int | None, str | None]:
    """Status, visit number and failure reason of a request."""
    row = conn.execute(
        "select status::text, visit, failure_reason from visit_requests where id = %s",
        (request_id,),
    ).fetchone()
    assert row is not None
    return row["status"], row["visit"], row["failure_reason"]


def journal(conn: DictConnection, ctx: Context, at: datetime, *statuses: tuple) -> None:
    """The journal applies these (visit, status, date) statuses of URL at ``at``."""
    events = [
        VisitStatusEvent(URL, "git", visit, date, status, b"s" * 20 if status != "failed" else None)
        for visit, status, date in statuses
    ]
    apply_events_batch(conn, ctx, events, visit_type_configs(conn), at)


def recurrent_visit_sent(conn: DictConnection, ctx: Context) -> tuple[VisitTypeConfig, Send]:
    """URL listed and sent as a recurrent visit at NOW: git's config, and that send."""
    list_origins(conn, ctx, [URL], now=NOW)
    ensure_built(conn, ctx, "git", NOW)
    config = visit_type_configs(conn)["git"]
    [recurrent] = plan_step(conn, ctx, config, lambda queue: 0, NOW).sends
    return config, recurrent


@pytest.mark.parametrize("flight_ended_by", ["presumed lost", "a partial checkpoint"])
def test_a_visit_under_way_when_a_request_was_sent_does_not_end_it(
    conn: DictConnection, ctx: Context, flight_ended_by: str
) -> None:
    list_origins(conn, ctx, [URL], now=NOW)
    config = visit_type_configs(conn)["git"]
    [recurrent] = plan_step(conn, ctx, config, lambda queue: 0, NOW).sends
    old = 7  # the archive numbers the recurrent visit
    journal(conn, ctx, NOW, (old, "created", NOW + timedelta(seconds=1)))
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)
    if flight_ended_by == "presumed lost":
        sent = NOW + ctx.cooldowns.scheduled + timedelta(minutes=1)
    else:  # the loader's checkpoint reads as a final status: the origin is back
        sent = NOW + timedelta(minutes=2)
        journal(conn, ctx, sent, (old, "partial", NOW + timedelta(minutes=1)))
    [taken] = take_pending(conn, ctx, "git", 10, sent)
    assert (recurrent.lane, taken.id) == ("express", request_id)

    journal(conn, ctx, sent, (old, "failed", sent + timedelta(minutes=1)))

    assert request(conn, request_id)[0] == "scheduled"
    own = old + 1
    journal(conn, ctx, sent, (own, "created", sent + timedelta(minutes=2)))
    journal(conn, ctx, sent, (own, "full", sent + timedelta(minutes=3)))
    assert request(conn, request_id) == ("succeeded", own, None)


def test_a_requests_visit_whose_final_status_comes_before_its_created_one_ends_it(
    conn: DictConnection, ctx: Context
) -> None:
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)
    assert [t.id for t in take_pending(conn, ctx, "git", 10, NOW)] == [request_id]

    journal(conn, ctx, NOW, (3, "failed", NOW + timedelta(minutes=2)))
    assert request(conn, request_id)[0] == "scheduled"
    journal(conn, ctx, NOW, (3, "created", NOW + timedelta(minutes=1)))

    assert request(conn, request_id) == ("failed", 3, "visit ended failed")


def test_a_request_whose_message_was_lost_is_sent_again_at_its_deadline_and_not_before(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [URL], now=NOW)
    ensure_built(conn, ctx, "git", NOW)  # (a rebuild would take the origin for lost)
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)
    config = visit_type_configs(conn)["git"]
    deadline = NOW + timedelta(seconds=request_window_s(config.time_limit_s))

    def step(at: datetime) -> tuple[list[Send], int]:
        plan = plan_step(conn, ctx, config, lambda queue: 0, at)
        return [s for s in plan.sends if s.order.url == URL], plan.recurrent.lost

    [sent], _ = step(NOW)
    # its message is gone (the broker's Redis wiped): no status ever comes
    assert step(deadline - timedelta(seconds=1)) == ([], 0)  # merely slow: left alone
    assert request(conn, request_id)[0] == "scheduled"
    [again], lost = step(deadline + timedelta(seconds=1))

    assert (sent.order.request_id, again.order.request_id, again.lane) == (
        request_id,
        request_id,
        "priority",
    )
    assert lost == 1
    assert again.order.scheduled_at > sent.order.scheduled_at
    assert check(conn, ctx, "git", deadline + timedelta(seconds=1)) == []
    assert step(deadline + timedelta(minutes=1)) == ([], 0)


def test_a_request_waiting_for_a_lost_request_visit_of_its_origin_waits_only_until_its_deadline(
    conn: DictConnection, ctx: Context
) -> None:
    first = create_request(conn, RequestVisit(url=URL, visit_type="git", priority=5), now=NOW)
    second = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)
    config = visit_type_configs(conn)["git"]
    window = timedelta(seconds=request_window_s(config.time_limit_s))
    assert [t.id for t in take_pending(conn, ctx, "git", 10, NOW)] == [first]

    requests_past_deadline(conn, ctx, "git", config.time_limit_s, NOW + window)
    assert take_pending(conn, ctx, "git", 10, NOW + window) == []
    requests_past_deadline(conn, ctx, "git", config.time_limit_s, NOW + window * 2)

    assert [t.id for t in take_pending(conn, ctx, "git", 10, NOW + window * 2)] == [first]
    assert request(conn, second)[0] == "pending"


def test_an_origin_sent_at_the_instant_of_its_last_final_status_is_in_flight(
    conn: DictConnection, ctx: Context
) -> None:
    _, recurrent = recurrent_visit_sent(conn, ctx)
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)
    ended = NOW + timedelta(minutes=5)
    visit = recurrent.order.visit
    journal(conn, ctx, ended, (visit, "created", NOW), (visit, "full", ended))

    # the scheduler's clock reads the very instant the recurrent visit ended
    assert [t.id for t in take_pending(conn, ctx, "git", 10, ended)] == [request_id]

    location = ctx.mirror.locate("git", recurrent.order.origin_id)
    assert location.where == "inflight"
    assert check(conn, ctx, "git", ended) == []


def test_a_request_waiting_for_a_lost_recurrent_visit_of_its_origin_waits_only_until_its_window(
    conn: DictConnection, ctx: Context
) -> None:
    config, recurrent = recurrent_visit_sent(conn, ctx)
    window = timedelta(seconds=request_window_s(config.time_limit_s))
    assert window < ctx.cooldowns.scheduled
    # its message is gone (the broker's Redis wiped): no status ever comes
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)

    def step(at: datetime) -> list[Send]:
        return plan_step(conn, ctx, config, lambda queue: 0, at).sends

    assert step(NOW + window - timedelta(seconds=1)) == []  # it may still run: left alone
    [sent] = step(NOW + window + timedelta(seconds=1))
    assert (sent.order.request_id, sent.lane) == (request_id, "priority")
    assert check(conn, ctx, "git", NOW + window + timedelta(seconds=1)) == []

    late = NOW + window + timedelta(minutes=1)
    old = recurrent.order.visit
    journal(conn, ctx, late, (old, "created", NOW + timedelta(minutes=1)), (old, "failed", late))
    assert request(conn, request_id)[0] == "scheduled"
    own = sent.order.visit
    journal(conn, ctx, late, (own, "created", late), (own, "full", late + timedelta(minutes=1)))
    assert request(conn, request_id) == ("succeeded", own, None)
