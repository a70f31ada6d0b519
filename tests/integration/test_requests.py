"""One-shot requests: ordering, lifecycle, the actor API, and save code now
behind a recurrent backlog, against real PostgreSQL, Redis and Dramatiq workers."""

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dramatiq
import pytest
import redis

from app.client import RevisitClient
from app.db.connection import DictConnection
from app.db.scheduling import visit_type_configs
from app.devtools.demo import make_repo
from app.domain.journal_event import VisitStatusEvent
from app.domain.queue_names import API_QUEUE, priority_queue
from app.inputs.api import InvalidPayload, RequestVisit
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
from app.settings import Settings
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys
from tests.integration.helpers import list_origins, recurrent_backlog, serve_requests
from tests.processes import running, wait_for

NOW = datetime(2026, 10, 1, tzinfo=UTC)


def ask(conn: DictConnection, url: str, priority: int = 0, **kw: object) -> int:
    return create_request(conn, RequestVisit(url=url, visit_type="git", priority=priority, **kw))  # type: ignore[arg-type]


def test_pending_requests_are_served_by_effective_priority_then_fifo(
    conn: DictConnection, ctx: Context
) -> None:
    low = ask(conn, "https://r.example/low", 0)
    high = ask(conn, "https://r.example/high", 10)
    low2 = ask(conn, "https://r.example/low2", 0)
    bumped = ask(conn, "https://r.example/bumped", 0)
    assert adjust_priority(conn, bumped, 20) == 20
    taken = take_pending(conn, ctx, "git", 10, NOW)
    assert [t.id for t in taken] == [bumped, high, low, low2]
    assert {get_request(conn, i)["status"] for i in (low, high)} == {"scheduled"}


def test_same_external_id_makes_one_request(conn: DictConnection) -> None:
    first = ask(conn, "https://r.example/x", external_id="web-42")
    assert ask(conn, "https://r.example/x", external_id="web-42") == first


def test_cancel_and_retry_follow_the_lifecycle(conn: DictConnection, ctx: Context) -> None:
    pending = ask(conn, "https://r.example/a")
    cancel_request(conn, ctx.redis, ctx.settings.redis_namespace, pending, NOW)
    assert get_request(conn, pending)["status"] == "aborted"
    with pytest.raises(RequestError, match="no blocked, pending, scheduled or running request"):
        cancel_request(conn, ctx.redis, ctx.settings.redis_namespace, pending, NOW)
    failed = ask(conn, "https://r.example/b", 5)
    conn.execute("update visit_requests set status = 'failed' where id = %s", (failed,))
    retry = retry_request(conn, failed)
    old, new = get_request(conn, failed), get_request(conn, retry)
    assert (old["status"], old["superseded_by"]) == ("failed", retry)
    assert (new["status"], new["supersedes"], new["priority"]) == ("pending", failed, 5)
    with pytest.raises(RequestError, match="already retried"):
        retry_request(conn, failed)


def test_unknown_visit_type_is_refused_with_the_known_ones(conn: DictConnection) -> None:
    with pytest.raises(RequestError, match=r"unknown visit type 'cvs' \(known: git, hg, svn\)"):
        create_request(conn, RequestVisit(url="https://r.example/c", visit_type="cvs"))


def journal(
    conn: DictConnection, ctx: Context, url: str, visit: int, status: str, minutes: int
) -> None:
    """Apply one status of ``url``'s git visit, dated ``minutes`` after NOW."""
    at = NOW + timedelta(minutes=minutes)
    snapshot = b"s" * 20 if status == "full" else None
    event = VisitStatusEvent(url, "git", visit, at, status, snapshot, None)
    apply_events_batch(conn, ctx, [event], visit_type_configs(conn), at)


def test_a_request_ends_with_its_own_visit_not_with_one_in_flight_when_it_was_scheduled(
    conn: DictConnection, ctx: Context
) -> None:
    url = "https://r.example/busy"
    list_origins(conn, ctx, [url], now=NOW)

    journal(conn, ctx, url, 7, "created", 0)  # a recurrent visit is under way
    request_id = ask(conn, url)
    take_pending(conn, ctx, "git", 1, NOW + timedelta(minutes=1))
    journal(conn, ctx, url, 7, "ongoing", 2)
    journal(conn, ctx, url, 8, "created", 3)  # the request's own visit
    journal(conn, ctx, url, 7, "failed", 4)
    assert get_request(conn, request_id)["status"] == "running"
    journal(conn, ctx, url, 8, "full", 5)

    done = get_request(conn, request_id)
    assert (done["status"], done["visit_status"]) == ("succeeded", "full")
    assert (done["started_at"], done["finished_at"]) == (
        NOW + timedelta(minutes=3),
        NOW + timedelta(minutes=5),
    )


def test_a_request_sent_as_a_visit_number_is_not_ended_by_another_visit_created_after_it(
    conn: DictConnection, ctx: Context
) -> None:
    url = "https://r.example/queued"
    list_origins(conn, ctx, [url], now=NOW)

    request_id = ask(conn, url)
    take_pending(conn, ctx, "git", 1, NOW + timedelta(minutes=1), visit=21)
    journal(conn, ctx, url, 20, "created", 2)  # a recurrent visit queued before, started after
    journal(conn, ctx, url, 20, "failed", 3)
    assert get_request(conn, request_id)["status"] == "scheduled"
    journal(conn, ctx, url, 21, "created", 4)
    journal(conn, ctx, url, 21, "full", 5)

    done = get_request(conn, request_id)
    assert (done["status"], done["started_at"]) == ("succeeded", NOW + timedelta(minutes=4))


def test_a_request_ends_with_its_visits_final_status_even_before_its_created_status(
    conn: DictConnection, ctx: Context
) -> None:
    url = "https://r.example/reordered"
    list_origins(conn, ctx, [url], now=NOW)
    request_id = ask(conn, url)
    take_pending(conn, ctx, "git", 1, NOW + timedelta(minutes=1), visit=31)
    journal(conn, ctx, url, 31, "full", 3)  # the journal reorders a visit's statuses
    journal(conn, ctx, url, 31, "created", 2)

    done = get_request(conn, request_id)
    assert (done["status"], done["finished_at"]) == ("succeeded", NOW + timedelta(minutes=3))


def test_save_code_now_behind_a_backlog_of_10000_starts_within_one_iteration(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    loop, express, backlog = recurrent_backlog(settings, conn, ctx, 10_000)
    url = make_repo(tmp_path / "wanted")
    request_id = ask(conn, url, 100)
    loop.step(datetime.now(tz=UTC))
    assert get_request(conn, request_id)["status"] == "scheduled"
    priority = DramatiqQueueKeys(loop.broker.namespace, priority_queue("git"))
    assert loop.broker.client.hlen(priority.messages) == 1
    serve_requests(
        tmp_path,
        lambda: get_request(conn, request_id)["status"] == "succeeded",
        "the request's visit to succeed",
    )
    done = get_request(conn, request_id)
    assert done["visit_status"] == "full" and done["started_at"] <= done["finished_at"]
    # the recurrent backlog is untouched: nobody consumed it
    assert loop.broker.client.hlen(express.messages) == backlog


def test_client_refuses_a_bad_field_before_sending(settings: Settings) -> None:
    client = RevisitClient.from_settings(settings)
    with pytest.raises(InvalidPayload, match="RequestVisit: priority"):
        client.request_visit(url="https://r.example/x", visit_type="git", priority="urgent")
    with pytest.raises(InvalidPayload, match="RequestVisit: url: Value error, URL holds"):
        client.request_visit(url="https://r.example/\x00", visit_type="git")
    long = "x" * 2000
    origins = [{"url": f"https://r.example/{long}{i}", "visit_type": "git"} for i in range(20_000)]
    with pytest.raises(InvalidPayload, match=r"RecordListing: payload of \d+ bytes, more than"):
        client.record_listing(lister_name="l", instance_name="i", origins=origins)
    api = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, API_QUEUE)
    assert redis.Redis.from_url(settings.redis_dsn()).hlen(api.messages) == 0


def test_api_actor_records_valid_requests_and_dead_letters_bad_payloads(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    client = RevisitClient.from_settings(settings)
    client.request_visit(
        url="https://r.example/good", visit_type="git", priority=3, external_id="k1"
    )
    bad = dramatiq.Message(
        queue_name=API_QUEUE,
        actor_name="request_visit",
        args=(),
        kwargs={"payload": {"url": "https://r.example/bad", "visit_type": "git", "priority": "x"}},
        options={},
    )
    client.broker.enqueue(bad)
    # valid, but the database refuses it: no such prerequisite
    client.request_visit(url="https://r.example/after", visit_type="git", depends_on=[999999])
    logs = tmp_path / "logs"
    logs.mkdir()
    dead = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, API_QUEUE).dead
    r = redis.Redis.from_url(settings.redis_dsn())
    with running({"api": ["revisit", "api"]}, {}, logs):
        wait_for(lambda: r.zcard(dead) == 2, 30, "the bad messages to be dead-lettered", logs)
        wait_for(
            lambda: conn.execute("select count(*) as n from visit_requests").fetchone()["n"] == 1,
            30,
            "the good request",
            logs,
        )
    rows = conn.execute("select url, base_priority from visit_requests").fetchall()
    assert rows == [{"url": "https://r.example/good", "base_priority": 3}]
    api_log = (logs / "api.log").read_text()
    assert "priority" in api_log and "depends_on: no request 999999" in api_log


def test_cli_request_commands(settings: Settings, conn: DictConnection) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app", *args], capture_output=True, text=True, check=False
        )

    added = cli("request", "add", "https://r.example/cli", "--priority", "7")
    assert added.returncode == 0, added.stderr
    request_id = added.stdout.strip()
    listed = cli("request", "list", "--status", "pending")
    assert "https://r.example/cli" in listed.stdout
    assert cli("request", "list", "--status", "sleeping").returncode == 2
    assert cli("request", "cancel", request_id).returncode == 0
    assert "aborted" in cli("request", "list").stdout
    bad_policy = cli("policy", "set", "git", "fastest_first=3")
    assert bad_policy.returncode == 2 and "unknown policy 'fastest_first'" in bad_policy.stderr
    assert cli("policy", "set", "git", "seed000_mixing=1").returncode == 0
    assert "seed000_mixing" in cli("policy", "show").stdout


def test_a_request_sent_without_a_number_ends_with_its_visit_even_before_its_created_status(
    conn: DictConnection, ctx: Context
) -> None:
    # The archive's loaders number their visits: the scheduler sends no number, and
    # the archive's journal may deliver a visit's final status before its created one.
    url = "https://r.example/archive"
    list_origins(conn, ctx, [url], now=NOW)
    request_id = ask(conn, url)
    take_pending(conn, ctx, "git", 1, NOW + timedelta(minutes=1), visit=None)
    journal(conn, ctx, url, 3, "full", 3)
    journal(conn, ctx, url, 3, "created", 2)
    journal(conn, ctx, url, 4, "created", 4)  # a later visit does not reopen it

    done = get_request(conn, request_id)
    assert (done["status"], done["finished_at"]) == ("succeeded", NOW + timedelta(minutes=3))
    row = conn.execute("select visit from visit_requests where id = %s", (request_id,)).fetchone()
    assert row is not None and row["visit"] == 3
