"""One visit of an origin at a time, whoever sends it: the scheduler's steps
(requests and recurrent lanes) against real PostgreSQL and Redis."""

from datetime import UTC, datetime, timedelta

import pytest

from app.db.connection import DictConnection
from app.db.scheduling import visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.inputs.api import RequestVisit
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.mirror_sync import check
from app.services.requests import (
    cancel_request,
    create_request,
    get_request,
    release_request_origin,
)
from app.services.scheduler_step import Send, plan_step
from tests.integration.helpers import list_origins

pytestmark = pytest.mark.every_mirror(sharded=True)

NOW = datetime(2026, 11, 20, tzinfo=UTC)
URL = "https://once.example/repo"


def step(conn: DictConnection, ctx: Context, minute: int) -> list[Send]:
    """One scheduler step of git at NOW + ``minute`` with every queue empty: the
    visits it sends of URL."""
    config = visit_type_configs(conn)["git"]
    plan = plan_step(conn, ctx, config, lambda queue: 0, NOW + timedelta(minutes=minute))
    return [s for s in plan.sends if s.order.url == URL]


def final_status(conn: DictConnection, ctx: Context, send: Send, minute: int) -> None:
    """The journal applies the final status of ``send``'s visit at NOW + ``minute``."""
    at = NOW + timedelta(minutes=minute)
    events = [
        VisitStatusEvent(URL, "git", send.order.visit, at, status, snapshot, None)
        for status, snapshot in (("created", None), ("full", b"s" * 20))
    ]
    apply_events_batch(conn, ctx, events, visit_type_configs(conn), at)


def test_a_requested_origin_due_in_its_pool_is_sent_once_until_its_visit_ends(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [URL], now=NOW)  # due at once in its pool
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)

    sends = step(conn, ctx, 1) + step(conn, ctx, 2) + step(conn, ctx, 3)

    assert [(s.lane, s.order.request_id) for s in sends] == [("priority", request_id)]
    assert check(conn, ctx, "git", NOW + timedelta(minutes=3)) == []
    final_status(conn, ctx, sends[0], 4)
    assert get_request(conn, request_id)["status"] == "succeeded"
    assert check(conn, ctx, "git", NOW + timedelta(minutes=4)) == []


def test_a_request_for_an_origin_in_flight_waits_for_that_visit_to_end(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [URL], now=NOW)
    [recurrent] = step(conn, ctx, 1)
    assert recurrent.lane != "priority"
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)

    assert step(conn, ctx, 2) + step(conn, ctx, 3) == []
    assert get_request(conn, request_id)["status"] == "pending"
    final_status(conn, ctx, recurrent, 4)
    [requested] = step(conn, ctx, 5)

    assert (requested.lane, requested.order.request_id) == ("priority", request_id)
    assert get_request(conn, request_id)["status"] == "scheduled"
    assert step(conn, ctx, 6) == []
    assert check(conn, ctx, "git", NOW + timedelta(minutes=6)) == []


def test_two_requests_for_one_origin_revisit_does_not_list_are_sent_one_after_the_other(
    conn: DictConnection, ctx: Context
) -> None:
    first = create_request(conn, RequestVisit(url=URL, visit_type="git", priority=5), now=NOW)
    second = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)

    [sent] = step(conn, ctx, 1)
    assert sent.order.request_id == first
    assert step(conn, ctx, 2) == []
    final_status(conn, ctx, sent, 3)
    [then] = step(conn, ctx, 4)

    assert then.order.request_id == second
    assert [get_request(conn, i)["status"] for i in (first, second)] == ["succeeded", "scheduled"]


def test_the_origin_of_an_aborted_requests_visit_goes_back_to_its_pool(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [URL], now=NOW)
    request_id = create_request(conn, RequestVisit(url=URL, visit_type="git"), now=NOW)
    [sent] = step(conn, ctx, 1)
    cancel_request(conn, ctx.redis, ctx.settings.redis_namespace, request_id, NOW)

    # the worker that stops (or skips) the visit publishes no final status
    release_request_origin(conn, ctx, request_id, NOW + timedelta(minutes=2))

    assert check(conn, ctx, "git", NOW + timedelta(minutes=2)) == []
    [again] = step(conn, ctx, 3)
    assert (sent.lane, again.lane, again.order.request_id) == ("priority", "express", None)
