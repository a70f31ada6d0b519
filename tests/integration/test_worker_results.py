"""Workers publish only valid statuses: a loader's junk result or a visit type
without a loader is recorded as a failed visit, and its request ends failed
with the reason stored (real scheduler, worker and journal processes)."""

import dataclasses
import time
from pathlib import Path

import pytest
import redis

from app.db.connection import DictConnection
from app.inputs.api import RequestVisit
from app.services.requests import create_request, get_request
from app.settings import Settings
from queues.keys import DramatiqQueueKeys
from tests.integration.helpers import WatchedPublisher, free_port
from tests.processes import running, wait_for, with_constants

ENV = with_constants(
    {"actors.scheduler.POLL_INTERVAL_S": 0.2},
    {"REVISIT_WORKER_VISIT_TYPES_ALLOW": '["simulated", "hg"]'},
)


def test_invalid_loader_results_and_missing_loaders_end_their_requests_failed(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    conn.execute("insert into visit_types (name, max_queue_length) values ('simulated', 5)")
    junk = create_request(
        conn,
        RequestVisit(
            url="sim://junk", visit_type="simulated", extra_loader_arguments={"status": "junk"}
        ),
    )
    no_loader = create_request(conn, RequestVisit(url="https://h.example/repo", visit_type="hg"))
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "scheduler": ["revisit", "scheduler"],
        "worker": ["revisit", "worker", "--lane", "priority", "--threads", "2"],
        "journal": ["revisit", "journal"],
    }
    with running(procs, ENV, logs):
        wait_for(
            lambda: {get_request(conn, i)["status"] for i in (junk, no_loader)} == {"failed"},
            60,
            "both requests to fail",
            logs,
        )
    assert get_request(conn, junk)["failure_reason"] == (
        "invalid loader result: status 'junk' (expected one of failed, full, not_found, partial)"
    )
    assert "no loader for visit type 'hg'" in get_request(conn, no_loader)["failure_reason"]
    statuses = conn.execute(
        "select url, last_visit_status::text as s from origin_visit_stats order by url"
    ).fetchall()
    assert statuses == [
        {"url": "https://h.example/repo", "s": "failed"},
        {"url": "sim://junk", "s": "failed"},
    ]
    r = redis.Redis.from_url(settings.redis_dsn())
    assert [k for k in r.keys(DramatiqQueueKeys("dramatiq", "*").dead) if r.zcard(k)] == []
    worker_log = (logs / "worker.log").read_text()
    assert "Traceback" not in worker_log
    assert "warning: no loader installed for visit type(s) hg" in worker_log
    assert (
        "warning: no loader installed for visit type(s) hg" in (logs / "scheduler.log").read_text()
    )


def test_a_visit_that_published_its_status_ends_without_retry_when_redis_refuses_after(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import actors.worker

    recording = WatchedPublisher(settings)
    monkeypatch.setattr(actors.worker, "publisher", lambda: recording)
    # Redis restarting: nothing listens on its address.
    refusing = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    away = dataclasses.replace(actors.worker.context(), redis=refusing)
    monkeypatch.setattr(actors.worker, "context", lambda: away)
    # Dramatiq retries a visit only when its actor raises.
    actors.worker.visit.fn(1, "sim://redis-away", "simulated", {}, 1, time.time())
    assert recording.statuses == ["created", "full"]
    assert "could not record its outcome" in caplog.text
