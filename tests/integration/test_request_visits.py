"""Which visit ends a request sent to the archive's loaders (they number their
visits: the request's is the first created after it was sent), against real
PostgreSQL and Redis."""

from datetime import UTC, datetime, timedelta

import pytest

from app.db.connection import DictConnection
from app.db.scheduling import visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.inputs.api import RequestVisit
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.requests import create_request, take_pending
from app.services.scheduler_step import plan_step
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
