"""The reference scheduler's own client (swh-scheduler 3.6.0) against revisit's RPC
server: a lister's life, then the visit stats after visits."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.db.connection import DictConnection
from app.db.scheduling import visit_type_configs
from app.domain.journal_event import VisitStatusEvent
from app.rpc.codec import decode, encode
from app.services.context import Context
from app.services.journal import apply_events_batch
from tests.conftest import IN_CI
from tests.reference.venv import reference_python

CLIENT = Path(__file__).resolve().parents[1] / "reference" / "lister_client.py"


@pytest.fixture(scope="session")
def reference() -> Path:
    """The reference's interpreter; under CI a failed install fails the test."""
    try:
        return reference_python()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"reference client unavailable: {exc}")
        pytest.skip(f"reference client unavailable: {exc}")


def run_client(python: Path, url: str, *args: str, client: Path = CLIENT) -> dict[str, object]:
    """Run a script of tests/reference with the reference's interpreter; what it printed."""
    done = subprocess.run(
        [str(python), str(client), url, *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_reference_client_drives_a_lister_life_cycle_and_reads_visit_stats(
    reference: Path, rpc_url: str, conn: DictConnection, ctx: Context
) -> None:
    life = run_client(reference, rpc_url, "lifecycle", "10000", "1000")
    assert life["same_lister"] is True
    assert life["recorded"] == 10000
    assert life["state"] == {"last_page": 10}
    assert life["finished_round_trip"] is True
    assert str(life["stale"]).startswith("StaleData")
    assert life["listed"] == life["distinct_listed"] == 10000
    assert life["visit_types"] == ["git", "tarball-directory"]
    # update_metrics refreshes scheduler_metrics as the scheduler process does
    assert life["metrics"] == {"git": [10000, 10000, 10000]} and life["metrics_got"] == 1
    assert str(life["unserved"]).startswith("501 task_run/start: not served by revisit")
    assert "listed_origins[0].visit_type: " in str(life["refused"])
    assert "'svn export' cannot name a visit type" in str(life["refused"])
    assert life["new_visit_type"] == ["tarball-directory"]  # created, paused, never refused
    assert life["listers"] == ["reference"]
    first = life["first_listed"]
    assert isinstance(first, dict) and first["lister_id"] == life["lister_id"]
    assert sum(ctx.mirror.sizes("git").values()) == 10000  # scheduled at once

    urls = [f"https://forge.example/group-0/project-{i}.git" for i in range(3)]
    now = datetime.now(tz=UTC)
    conn.execute("insert into visit_scheduler_queue_position values ('git', %s)", (now,))
    snapshot = bytes(range(20))
    events = [
        VisitStatusEvent(urls[0], "git", 1, now - timedelta(minutes=1), "full", snapshot),
        VisitStatusEvent(urls[1], "git", 1, now - timedelta(minutes=1), "not_found", None),
    ]
    apply_events_batch(conn, ctx, events, visit_type_configs(conn), now)
    seen = run_client(reference, rpc_url, "stats", *urls, "https://forge.example/never-listed")
    by_url = {s["url"]: s for s in seen["stats"]}  # type: ignore[attr-defined]
    assert by_url[urls[0]]["last_visit_status"] == "successful"
    assert by_url[urls[0]]["last_snapshot"] == snapshot.hex()
    assert by_url[urls[1]]["last_visit_status"] == "not_found"
    # listed, never visited: no row, as the reference
    assert len(by_url) == 2 and all(s["has_next_position"] for s in by_url.values())
    assert seen["positions"] == {"git": int(now.timestamp())}


def post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=body, headers={"content-type": "application/x-msgpack"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, decode(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, decode(exc.read())


def test_unknown_endpoints_and_bad_bodies_get_errors_not_crashes(rpc_url: str) -> None:
    status, error = post(rpc_url + "task/grab_ready", encode({"task_type": "load-git"}))
    assert status == 501 and "not served by revisit" in error["message"]  # type: ignore[index]
    status, error = post(rpc_url + "no/such", b"")
    assert status == 404
    status, error = post(rpc_url + "lister/get", b"\xc1 not msgpack")
    assert status == 400 and error["type"] == "SchedulerException"  # type: ignore[index]
    status, error = post(rpc_url + "lister/get", encode({"name": "x", "colour": "red"}))
    assert status == 400 and "colour" in error["message"]  # type: ignore[index]
    status, answer = post(rpc_url + "lister/get", encode({"name": "x"}))
    assert status == 200 and answer is None


def test_the_server_outlives_its_database_connections_being_cut(
    rpc_url: str, conn: DictConnection
) -> None:
    body = encode({"name": "x"})
    assert post(rpc_url + "lister/get_or_create", body)[0] == 200
    conn.execute(
        "select pg_terminate_backend(pid) from pg_stat_activity"
        " where datname = current_database() and pid <> pg_backend_pid()"
    )
    statuses = [post(rpc_url + "lister/get", body)[0] for _ in range(5)]
    # a request on a cut connection gets 503 (the reference's client retries it),
    # then the pool reconnects
    assert set(statuses[:1]) <= {200, 503} and statuses[-1] == 200


def test_visit_stats_upserted_by_the_reference_client_are_stored_and_move_the_origins_in_the_mirror(
    reference: Path, rpc_url: str, conn: DictConnection, ctx: Context
) -> None:
    life = run_client(reference, rpc_url, "lifecycle", "10", "10")
    urls = [f"https://forge.example/group-0/project-{i}.git" for i in range(3)]
    before = ctx.mirror.sizes("git")

    seen = run_client(reference, rpc_url, "upsert", "git", *urls)

    # None keeps what is stored: the later upsert gave only the snapshot
    assert seen["stats"] == {
        urls[0]: [True, "failed", bytes(range(20)).hex()],
        urls[1]: [True, "failed", None],
        urls[2]: [True, "failed", None],
    }
    assert "origin_visit_stats[0].visit_type: 'svn export' cannot name" in str(seen["refused"])
    after = ctx.mirror.sizes("git")
    assert sum(after.values()) == sum(before.values()) == life["recorded"]
    assert after != before  # the three failed origins left the never-visited pool
    unlisted = run_client(reference, rpc_url, "upsert", "bzr", "https://forge.example/b")
    assert unlisted["stats"] == {
        "https://forge.example/b": [True, "failed", bytes(range(20)).hex()]
    }
    paused = conn.execute("select enabled from visit_types where name = 'bzr'").fetchone()
    assert paused == {"enabled": False}  # created paused, as by a listing
