"""Requests with prerequisites and parents (seed 004): blocked until their
prerequisites completed, aborted when one fails that may not, following a
retry; against real PostgreSQL (and Redis for cancel)."""

from datetime import UTC, datetime, timedelta

import pytest

from app.db.connection import DictConnection
from app.db.scheduling import visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.inputs.api import InvalidPayload, RequestVisit, validated
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.requests import (
    RequestError,
    adjust_priority,
    cancel_request,
    create_request,
    get_request,
    retry_request,
    take_pending,
)
from tests.integration.helpers import list_origins

NOW = datetime(2026, 10, 1, tzinfo=UTC)


def ask(conn: DictConnection, name: str, **fields: object) -> int:
    url = f"https://d.example/{name}"
    return create_request(
        conn, RequestVisit.model_validate({"url": url, "visit_type": "git", **fields})
    )


def status(conn: DictConnection, *ids: int) -> list[str]:
    return [get_request(conn, i)["status"] for i in ids]


def run(
    conn: DictConnection, ctx: Context, request_id: int, final: str, minute: int, **others: str
) -> None:
    """Send the pending requests (``request_id`` and no other, but for ``others``:
    ``r<id>`` -> their final status) and report their visits ending ``final``."""
    finals = {request_id: final} | {int(k[1:]): v for k, v in others.items()}
    taken = take_pending(conn, "git", 10, NOW + timedelta(minutes=minute), visit=minute)
    assert sorted(t.id for t in taken) == sorted(finals)
    at = NOW + timedelta(minutes=minute, seconds=30)
    events = []
    for t in taken:
        snapshot = b"s" * 20 if finals[t.id] == "full" else None
        events += [
            VisitStatusEvent(t.url, "git", minute, at, "created", None, None),
            VisitStatusEvent(t.url, "git", minute, at, finals[t.id], snapshot, None),
        ]
    apply_events_batch(conn, ctx, events, visit_type_configs(conn), at)


@pytest.fixture
def origins(conn: DictConnection, ctx: Context) -> None:
    names = "abcdefgh"
    list_origins(conn, ctx, [f"https://d.example/{n}" for n in names], now=NOW)


def test_a_three_level_chain_runs_in_order(
    conn: DictConnection, ctx: Context, origins: None
) -> None:
    a = ask(conn, "a")
    b = ask(conn, "b", depends_on=[a], priority=50)
    c = ask(conn, "c", depends_on=[b], priority=100)
    assert status(conn, a, b, c) == ["pending", "blocked", "blocked"]
    # each step sends only the request whose prerequisites completed, though the
    # blocked ones outrank it
    run(conn, ctx, a, "full", 1)
    assert status(conn, a, b, c) == ["succeeded", "pending", "blocked"]
    run(conn, ctx, b, "full", 2)
    assert status(conn, b, c) == ["succeeded", "pending"]
    run(conn, ctx, c, "full", 3)
    assert status(conn, c) == ["succeeded"]


def test_a_failed_prerequisite_aborts_its_dependents_but_not_one_allowed_to_fail(
    conn: DictConnection, ctx: Context, origins: None
) -> None:
    a = ask(conn, "a")
    b = ask(conn, "b", depends_on=[a])
    c = ask(conn, "c", depends_on=[b])
    tolerant = ask(conn, "d", depends_on=[a], allowed_to_fail=[a])
    run(conn, ctx, a, "failed", 1)

    assert status(conn, a, b, c, tolerant) == ["failed", "aborted", "aborted", "pending"]
    assert get_request(conn, b)["failure_reason"] == f"prerequisite request {a} failed"
    assert get_request(conn, c)["failure_reason"] == f"prerequisite request {b} aborted"
    assert get_request(conn, c)["finished_at"] == NOW + timedelta(minutes=1, seconds=30)


def test_a_retry_repoints_the_dependents_and_revives_those_its_failure_aborted(
    conn: DictConnection, ctx: Context, origins: None
) -> None:
    a = ask(conn, "a")
    b = ask(conn, "b", depends_on=[a])
    c = ask(conn, "c", depends_on=[b])
    cancelled = ask(conn, "e", depends_on=[a])
    cancel_request(conn, ctx.redis, ctx.settings.redis_namespace, cancelled, NOW)
    run(conn, ctx, a, "failed", 1)

    again = retry_request(conn, a)
    assert status(conn, again, b, c, cancelled) == ["pending", "blocked", "blocked", "aborted"]
    assert get_request(conn, b)["failure_reason"] is None
    rows = conn.execute(
        "select request_id, prerequisite from request_dependencies order by request_id"
    ).fetchall()
    assert [(r["request_id"], r["prerequisite"]) for r in rows] == [
        (b, again),
        (c, b),
        (cancelled, again),
    ]
    run(conn, ctx, again, "full", 2)
    assert status(conn, b, c) == ["pending", "blocked"]


def test_a_revived_request_with_another_failed_prerequisite_is_aborted_again(
    conn: DictConnection, ctx: Context, origins: None
) -> None:
    a = ask(conn, "a")
    f = ask(conn, "f")
    both = ask(conn, "b", depends_on=[a, f])
    # both end in one batch: the lower id, a, is the one that aborts it
    run(conn, ctx, a, "failed", 1, **{f"r{f}": "failed"})

    retry_request(conn, a)
    assert status(conn, both) == ["aborted"]
    assert get_request(conn, both)["failure_reason"] == f"prerequisite request {f} failed"


def test_cancelling_a_blocked_request_aborts_its_dependents_unless_allowed_to_fail(
    conn: DictConnection, ctx: Context
) -> None:
    a = ask(conn, "a")
    b = ask(conn, "b", depends_on=[a])
    c = ask(conn, "c", depends_on=[b])
    tolerant = ask(conn, "d", depends_on=[b], allowed_to_fail=[b])
    cancel_request(conn, ctx.redis, ctx.settings.redis_namespace, b, NOW)

    assert status(conn, a, b, c, tolerant) == ["pending", "aborted", "aborted", "pending"]
    assert get_request(conn, c)["failure_reason"] == f"prerequisite request {b} aborted"


def test_a_child_takes_its_parents_effective_priority_unless_it_names_one(
    conn: DictConnection,
) -> None:
    parent = ask(conn, "p", priority=10)
    adjust_priority(conn, parent, 5)
    assert get_request(conn, ask(conn, "c1", parent=parent))["base_priority"] == 15
    assert get_request(conn, ask(conn, "c2", parent=parent, priority=-3))["base_priority"] == -3
    child = get_request(conn, ask(conn, "c3", parent=parent))
    assert (child["parent"], child["status"]) == (parent, "pending")


def counts(conn: DictConnection) -> tuple[int, int]:
    row = conn.execute(
        "select (select count(*) from visit_requests) as r,"
        " (select count(*) from request_dependencies) as d"
    ).fetchone()
    assert row is not None
    return row["r"], row["d"]


def test_unknown_retried_aborted_or_failed_prerequisites_and_cycles_are_refused_unwritten(
    conn: DictConnection, ctx: Context, origins: None
) -> None:
    a = ask(conn, "a")
    keyed = ask(conn, "k", depends_on=[a], external_id="wf-1")
    aborted = ask(conn, "x")
    cancel_request(conn, ctx.redis, ctx.settings.redis_namespace, aborted, NOW)
    retried = ask(conn, "r")
    run(conn, ctx, a, "failed", 1, **{f"r{retried}": "failed"})
    retry = retry_request(conn, retried)
    before = counts(conn)

    refusals = {
        "depends_on: no request 999999, 999998": dict(depends_on=[999999, 999998]),
        f"depends_on: request {retried} was retried as request {retry}: depend on that one": dict(
            depends_on=[retried]
        ),
        f"depends_on: request {aborted} is aborted": dict(depends_on=[aborted]),
        f"depends_on: request {a} failed (retry it, or allow it to fail)": dict(depends_on=[a]),
        f"depends_on: request {keyed} (external_id 'wf-1') would wait for itself: a cycle": dict(
            depends_on=[keyed], external_id="wf-1"
        ),
        "parent: no request 999999": dict(parent=999999),
    }
    for reason, fields in refusals.items():
        with pytest.raises(RequestError) as refused:
            ask(conn, "new", **fields)
        assert str(refused.value) == reason
    assert counts(conn) == before
    # allowed to fail, a failed prerequisite counts as completed
    assert status(conn, ask(conn, "ok", depends_on=[a], allowed_to_fail=[a])) == ["pending"]


def test_allowed_to_fail_must_name_prerequisites() -> None:
    with pytest.raises(
        InvalidPayload, match="RequestVisit: allowed_to_fail: Value error, request 3"
    ):
        validated(
            RequestVisit,
            {
                "url": "https://d.example/a",
                "visit_type": "git",
                "depends_on": [2],
                "allowed_to_fail": [3],
            },
        )
    with pytest.raises(InvalidPayload, match=r"RequestVisit: depends_on\.0"):
        validated(
            RequestVisit, {"url": "https://d.example/a", "visit_type": "git", "depends_on": [0]}
        )
