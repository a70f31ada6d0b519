"""Requests with prerequisites and parents (seed 004): blocked until their
prerequisites completed, aborted when one fails that may not, following a
retry; against real PostgreSQL and Redis, and real workers for one chain."""

import subprocess
import sys
import uuid
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import redis

from app.client import RevisitClient
from app.db.connection import Connections, DictConnection
from app.db.migrate import migrate
from app.db.scheduling import visit_type_configs
from app.devtools.demo import make_repo
from app.domain.journal_event import VisitStatusEvent
from app.domain.queue_names import API_QUEUE
from app.inputs.api import InvalidPayload, RequestVisit, validated
from app.kafka.codec import encode, visit_status_value
from app.services.context import Context
from app.services.journal import apply_events_batch
from app.services.journal_batch import BatchWriter
from app.services.requests import (
    RequestError,
    adjust_priority,
    cancel_request,
    create_request,
    end_unvisited_request,
    get_request,
    retry_request,
    take_pending,
)
from app.settings import Settings
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys
from tests.integration.helpers import list_origins
from tests.processes import running, wait_for, with_constants

T = TypeVar("T")

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
    taken = take_pending(conn, ctx, "git", 10, NOW + timedelta(minutes=minute), visit=minute)
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
    assert adjust_priority(conn, c, 5) == 105  # an operator may bump a blocked request
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


def test_unknown_retried_aborted_or_failed_prerequisites_or_parents_and_cycles_are_refused_unwritten(  # noqa: E501
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

    refusals: dict[str, dict[str, Any]] = {
        "depends_on: no request 999999, 999998": dict(depends_on=[999999, 999998]),
        f"depends_on: request {retried} was retried as request {retry}: depend on that one": dict(
            depends_on=[retried]
        ),
        f"depends_on: request {aborted} is aborted": dict(depends_on=[aborted]),
        f"depends_on: request {a} failed (retry it, or allow it to fail)": dict(depends_on=[a]),
        f"depends_on: request {keyed} (external_id 'wf-1') would wait for itself: a cycle": dict(
            depends_on=[keyed], external_id="wf-1"
        ),
        "parent: no request 999999": dict(parent=999999, priority=5),
        f"parent: request {aborted} is aborted": dict(parent=aborted),
        f"parent: request {retried} was retried as request {retry}: make it for that one": dict(
            parent=retried
        ),
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


def test_two_prerequisites_ending_in_parallel_journal_writers_release_their_dependent(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    writers = 4
    connections = Connections(settings, writers)

    def on_a_connection(work: Callable[[DictConnection], T]) -> T:
        with connections.borrow() as c:
            return work(c)

    batch = BatchWriter(ctx, on_a_connection, writers)
    try:
        for round_ in range(10):
            # two origins the batch writes in two different transactions
            urls = [f"https://d.example/p{round_}-{i}" for i in range(40)]
            key = {u: zlib.crc32(f"{u}\x00git".encode()) % writers for u in urls}
            first = urls[0]
            second = next(u for u in urls if key[u] != key[first])
            prerequisites = [
                create_request(conn, RequestVisit(url=u, visit_type="git")) for u in (first, second)
            ]
            waiting = ask(conn, f"w{round_}", depends_on=prerequisites)
            at = NOW + timedelta(minutes=round_)
            taken = take_pending(conn, ctx, "git", 10, at, visit=1)
            assert sorted(t.id for t in taken) == prerequisites
            payloads: list[bytes | None] = [
                encode(
                    visit_status_value(
                        u, 1, at + timedelta(seconds=1), "full", b"s" * 20, "git", None
                    )
                )
                for u in (first, second)
            ]
            batch.write(payloads, at)
            assert status(conn, *prerequisites, waiting) == ["succeeded", "succeeded", "pending"]
            take_pending(conn, ctx, "git", 10, at)  # out of the way of the next round
    finally:
        batch.close()
        connections.close()


def test_a_request_ended_by_its_worker_aborts_its_dependents(
    conn: DictConnection, ctx: Context
) -> None:
    sent = ask(conn, "u")
    waiting = ask(conn, "w", depends_on=[sent])
    take_pending(conn, ctx, "git", 10, NOW, visit=None)
    assert end_unvisited_request(conn, ctx, sent, "refused URL", NOW)
    assert status(conn, sent, waiting) == ["failed", "aborted"]
    # its origin is no longer in flight: a new request for it is sent at once
    again = ask(conn, "u")
    assert [t.id for t in take_pending(conn, ctx, "git", 10, NOW, visit=None)] == [again]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, check=False
    )


def test_cli_adds_requests_after_others_and_shows_what_they_wait_for(conn: DictConnection) -> None:
    first = cli("request", "add", "https://d.example/one", "--priority", "7").stdout.strip()
    second = cli("request", "add", "https://d.example/two").stdout.strip()
    added = cli(
        "request",
        "add",
        "https://d.example/three",
        "--after",
        f"{first},{second}",
        "--allow-fail",
        second,
        "--parent",
        first,
    )
    assert added.returncode == 0, added.stderr
    third = added.stdout.strip()
    row = get_request(conn, int(third))
    assert (row["status"], row["base_priority"], row["parent"]) == ("blocked", 7, int(first))

    listed = cli("request", "list", "--status", "blocked")
    assert "https://d.example/three" in listed.stdout and f"{first},{second}" in listed.stdout
    shown = cli("request", "show", third).stdout
    assert "status: blocked" in shown
    assert f"  {second} pending https://d.example/two (allowed to fail)" in shown
    assert f"  {third} blocked https://d.example/three" in cli("request", "show", first).stdout

    before = counts(conn)
    unknown = cli("request", "add", "https://d.example/four", "--after", "999999")
    assert unknown.returncode != 0 and "depends_on: no request 999999" in unknown.stderr
    bad = cli("request", "add", "https://d.example/four", "--after", "1;2")
    assert bad.returncode != 0 and "--after: expected request ids" in bad.stderr
    stray = cli("request", "add", "https://d.example/four", "--after", first, "--allow-fail", "3")
    assert stray.returncode != 0 and "allowed_to_fail: Value error, request 3" in stray.stderr
    assert counts(conn) == before
    assert cli("request", "cancel", first).returncode == 0
    assert status(conn, int(third)) == ["aborted"]


def test_client_refuses_an_allowed_to_fail_request_that_is_no_prerequisite(
    settings: Settings,
) -> None:
    client = RevisitClient.from_settings(settings)
    with pytest.raises(InvalidPayload, match="RequestVisit: allowed_to_fail"):
        client.request_visit(
            url="https://d.example/a", visit_type="git", depends_on=[1], allowed_to_fail=[2]
        )
    api = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, API_QUEUE)
    assert redis.Redis.from_url(settings.redis_dsn()).hlen(api.messages) == 0


def test_priority_workers_run_a_chain_in_order_and_abort_what_follows_a_failure(
    conn: DictConnection, tmp_path: Path
) -> None:
    urls = [make_repo(tmp_path / "forge" / name) for name in ("a", "b", "c")]
    missing = "file://" + str(tmp_path / "forge" / "missing")
    a = create_request(conn, RequestVisit(url=urls[0], visit_type="git"))
    b = create_request(conn, RequestVisit(url=urls[1], visit_type="git", depends_on=[a]))
    c = create_request(conn, RequestVisit(url=urls[2], visit_type="git", depends_on=[b]))
    lost = create_request(conn, RequestVisit(url=missing, visit_type="git", depends_on=[a]))
    after_lost = create_request(
        conn, RequestVisit(url=urls[0], visit_type="git", depends_on=[lost])
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = {
        "scheduler": ["revisit", "scheduler"],
        "priority": ["revisit", "worker", "--lane", "priority", "--threads", "2"],
        "journal": ["revisit", "journal"],
    }
    fast = with_constants({"actors.scheduler.POLL_INTERVAL_S": 0.2}, {})
    with running(processes, fast, logs):
        wait_for(
            lambda: status(conn, c, after_lost) == ["succeeded", "aborted"],
            120,
            "the chain to succeed and the failed branch to be aborted",
            logs,
        )
    rows = {i: get_request(conn, i) for i in (a, b, c, lost)}
    assert rows[a]["finished_at"] <= rows[b]["scheduled_at"]
    assert rows[b]["finished_at"] <= rows[c]["scheduled_at"]
    assert rows[lost]["status"] == "failed"
    assert get_request(conn, after_lost)["failure_reason"] == f"prerequisite request {lost} failed"


def test_a_database_with_requests_upgrades_to_dependencies(service_env: dict[str, str]) -> None:
    admin = service_env["REVISIT_DATABASE_URL"]
    name = f"u_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"create database {name}")
    url = psycopg.conninfo.make_conninfo(admin, dbname=name)
    try:
        migrate(url, target=21)
        with psycopg.connect(url) as c:
            c.execute(
                "insert into visit_requests (url, visit_type) values ('https://d.example/o', 'git')"
            )
        assert [m.version for m in migrate(url, target=22)] == [22]
        with psycopg.connect(url) as c:
            c.execute(
                "insert into visit_requests (url, visit_type, status)"
                " values ('https://d.example/n', 'git', 'blocked')"
            )
            rows = c.execute("select status::text from visit_requests order by id").fetchall()
        assert rows == [("pending",), ("blocked",)]
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"drop database if exists {name} with (force)")
