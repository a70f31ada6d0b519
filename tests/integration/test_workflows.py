"""Aborting a running request, and the add forge now workflow (seed 004, issue
36), against real PostgreSQL, Redis, the journal and worker processes."""

from datetime import UTC, datetime
from pathlib import Path

import pytest

from actors.lister_scheduler import ListerScheduler
from app.db.connection import DictConnection
from app.db.listings import find_lister, register_lister
from app.devtools.demo import make_forge
from app.inputs.api import AddForge, RequestVisit
from app.inputs.listing import ListedOriginIn
from app.listers.forges import add_forge
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.requests import (
    RequestError,
    adjust_priority,
    cancel_request,
    create_request,
    end_listing_request,
    get_request,
    request_first_visits,
    retry_request,
)
from app.settings import Settings
from queues.keys import visit_outcomes
from tests.integration.helpers import cli, stats_by_url
from tests.integration.test_rpc_reference_client import reference  # noqa: F401
from tests.integration.test_rpc_tasks import run_client
from tests.processes import running, wait_for, with_constants

SIMULATED = with_constants(
    {"actors.scheduler.POLL_INTERVAL_S": 0.2, "actors.watch.POLL_S": 0.1},
    {"REVISIT_WORKER_VISIT_TYPES_ALLOW": '["simulated"]'},
)


def simulated_origin(conn: DictConnection, ctx: Context, url: str) -> None:
    conn.execute("insert into visit_types (name, max_queue_length) values ('simulated', 5)")
    conn.execute("update visit_types set time_limit = interval '60 s' where name = 'simulated'")
    lister = register_lister(conn, "sim", "abort", None)
    row = ListedOriginIn(url=url, visit_type="simulated")
    record_listed_origins(conn, ctx, lister, [(1, row)], datetime.now(tz=UTC))


def ask(conn: DictConnection, url: str, duration_s: float, **fields: object) -> int:
    request = RequestVisit.model_validate(
        {
            "url": url,
            "visit_type": "simulated",
            "extra_loader_arguments": {"duration_s": duration_s},
            **fields,
        }
    )
    return create_request(conn, request)


def statuses(conn: DictConnection, *ids: int) -> list[str]:
    return [get_request(conn, i)["status"] for i in ids]


def test_aborting_a_running_request_stops_its_visit_and_leaves_its_origin_unharmed(
    conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    url = "sim://slow"
    simulated_origin(conn, ctx, url)
    slow = ask(conn, url, 60.0)
    after = ask(conn, "sim://after", 0.0, depends_on=[slow])
    child = ask(conn, "sim://child", 60.0, parent=slow)
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "scheduler": ["revisit", "scheduler"],
        # one thread: the next request can start only once the slow visit stopped
        "priority": ["revisit", "worker", "--lane", "priority", "--threads", "1"],
        "journal": ["revisit", "journal"],
    }
    with running(procs, SIMULATED, logs):
        wait_for(lambda: statuses(conn, slow) == ["running"], 60, "the slow visit to run", logs)
        aborted = cancel_request(
            conn, ctx.redis, ctx.settings.redis_namespace, slow, datetime.now(tz=UTC), "alice"
        )
        assert sorted(aborted) == sorted([slow, child, after])
        quick = ask(conn, "sim://quick", 0.0)
        wait_for(
            lambda: statuses(conn, quick) == ["succeeded"],
            20,
            "a request to run on the thread the aborted visit held",
            logs,
        )
        assert "stopped visiting sim://slow" in (logs / "priority.log").read_text()
    row = get_request(conn, slow)
    assert (row["status"], row["failure_reason"]) == ("aborted", "aborted by alice")
    assert get_request(conn, child)["failure_reason"] == f"parent request {slow} aborted"
    assert get_request(conn, after)["failure_reason"] == f"prerequisite request {slow} aborted"
    # no final status: the origin's stats hold no failed visit, no outcome is
    # counted, and the aborted visit left the origin out of flight (the
    # recurrent scheduler may have sent it since)
    stats = stats_by_url(conn)[url]
    assert (stats["failed_visits"], stats["last_final_date"]) == (0, None)
    assert stats["last_scheduled"] != row["scheduled_at"]
    assert (
        ctx.redis.hget(visit_outcomes(ctx.settings.redis_namespace, "simulated"), "failed") is None
    )
    assert sum(ctx.mirror.sizes("simulated").values()) == 1


def forge(path: Path, **fields: object) -> AddForge:
    return AddForge.model_validate(
        {
            "lister": "gitdir",
            "instance": "forge",
            "url": path.as_uri(),
            "arguments": {"path": str(path)},
            **fields,
        }
    )


def children(conn: DictConnection, parent: int) -> dict[str, str]:
    rows = conn.execute(
        "select url, status::text from visit_requests where parent = %s", (parent,)
    ).fetchall()
    return {r["url"]: r["status"] for r in rows}


def list_backlog(conn: DictConnection, ctx: Context, root: Path, count: int) -> list[str]:
    """``count`` never-visited git origins, updated long ago (first in the
    recurrent never-visited pool), whose visits end not_found."""
    lister = register_lister(conn, "test", "backlog", None)
    old = datetime(2000, 1, 1, tzinfo=UTC)
    urls = [(root / f"gone-{i:04d}").as_uri() for i in range(count)]
    rows = [
        (i + 1, ListedOriginIn(url=u, visit_type="git", last_update=old))
        for i, u in enumerate(urls)
    ]
    record_listed_origins(conn, ctx, lister, rows, datetime.now(tz=UTC))
    return urls


def test_add_forge_now_visits_every_listed_origin_by_its_request_ahead_of_the_backlog(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    urls = make_forge(tmp_path / "forge", 50)
    # bounded queues, full of the backlog as a busy archive's are
    conn.execute("update visit_types set max_queue_length = 20 where name = 'git'")
    backlog = list_backlog(conn, ctx, tmp_path / "backlog", 1000)
    root = add_forge(conn, forge(tmp_path / "forge"), datetime.now(tz=UTC))
    assert (get_request(conn, root)["status"], get_request(conn, root)["priority"]) == (
        "running",
        50,
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "lister_worker": ["revisit", "lister", "worker"],
        "scheduler": ["revisit", "scheduler"],
        "priority": ["revisit", "worker", "--lane", "priority", "--threads", "2"],
        # the recurrent backlog, served all along
        "recurrent": ["revisit", "worker", "--lane", "recurrent", "--threads", "2"],
        "journal": ["revisit", "journal"],
    }
    with running(procs, with_constants({"actors.scheduler.POLL_INTERVAL_S": 0.2}), logs):
        assert len(ListerScheduler(settings).step(datetime.now(tz=UTC))) == 1
        wait_for(
            lambda: set(children(conn, root).values()) == {"succeeded"},
            180,
            "the forge's first visits",
            logs,
        )
        stats = stats_by_url(conn)
    assert get_request(conn, root)["status"] == "succeeded"
    assert sorted(children(conn, root)) == sorted(urls)
    # each forge origin was visited once, by its request: no recurrent visit
    # of one started first (or at all)
    visits = {
        r["url"]: r["visit"]
        for r in conn.execute("select url, visit from visit_requests where parent = %s", (root,))
    }
    for url in urls:
        row = stats[url]
        assert row["eventful_visits"] == 1 and row["uneventful_visits"] == 0
        assert row["last_visit_number"] == visits[url]
    # the backlog, listed before the forge, was being served and was not done
    visited = sum(1 for u in backlog if stats.get(u, {}).get("last_final_date"))
    assert 0 < visited < len(backlog)
    shown = cli("request", "show", str(root)).stdout
    assert "children: 50/50 visited (50 succeeded)" in shown
    listed = cli("request", "list", "--limit", "500").stdout
    assert "50/50" in listed


def test_aborting_a_forge_aborts_its_open_first_visits_and_refusals_write_nothing(
    conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    (tmp_path / "forge").mkdir()
    root = add_forge(conn, forge(tmp_path / "forge", priority=70), datetime.now(tz=UTC))
    lister_id = find_lister(conn, "gitdir", "forge")["id"]
    assert adjust_priority(conn, root, 5) == 75  # the listing under way
    first = [(f"https://f.example/{i}", "git") for i in range(3)]
    request_first_visits(conn, lister_id, [*first, first[0]], datetime.now(tz=UTC))
    assert set(children(conn, root).values()) == {"blocked"}
    assert {get_request(conn, i)["priority"] for i in _ids(conn, root)} == {75}

    def counts() -> tuple[int, int]:
        row = conn.execute(
            "select (select count(*) from visit_requests) as r,"
            " (select count(*) from lister_schedules) as s"
        ).fetchone()
        assert row is not None
        return row["r"], row["s"]

    before = counts()
    refusals = [
        (forge(tmp_path / "forge"), "lister: its listing is already request"),
        (forge(tmp_path / "forge", lister="nope"), "lister: "),
        (forge(tmp_path / "forge", arguments={"colour": "red"}), "arguments: gitdir"),
    ]
    for bad, reason in refusals:
        with pytest.raises(RequestError, match=reason):
            add_forge(conn, bad, datetime.now(tz=UTC))
    assert counts() == before
    with pytest.raises(RequestError, match="is a listing: add the forge again"):
        retry_request(conn, root)

    end_listing_request(conn, lister_id, None, datetime.now(tz=UTC))
    assert set(children(conn, root).values()) == {"pending"}
    aborted = cancel_request(
        conn, ctx.redis, ctx.settings.redis_namespace, root, datetime.now(tz=UTC)
    )
    assert len(aborted) == 3  # the listing itself had succeeded
    assert set(children(conn, root).values()) == {"aborted"}
    # the lister's next listing makes no more requests for the aborted workflow
    request_first_visits(conn, lister_id, [("https://f.example/9", "git")], datetime.now(tz=UTC))
    assert len(children(conn, root)) == 3


def _ids(conn: DictConnection, parent: int) -> list[int]:
    rows = conn.execute("select id from visit_requests where parent = %s", (parent,)).fetchall()
    return [r["id"] for r in rows]


def test_a_failed_forge_listing_aborts_its_first_visits(
    conn: DictConnection, tmp_path: Path
) -> None:
    (tmp_path / "forge").mkdir()
    root = add_forge(conn, forge(tmp_path / "forge"), datetime.now(tz=UTC))
    lister_id = find_lister(conn, "gitdir", "forge")["id"]
    request_first_visits(conn, lister_id, [("https://f.example/a", "git")], datetime.now(tz=UTC))
    end_listing_request(conn, lister_id, "OSError: gone", datetime.now(tz=UTC))
    row = get_request(conn, root)
    assert (row["status"], row["failure_reason"]) == ("failed", "OSError: gone")
    assert children(conn, root) == {"https://f.example/a": "aborted"}


def test_cli_adds_a_forge_and_refuses_a_bad_one_naming_the_field(
    conn: DictConnection, tmp_path: Path
) -> None:
    (tmp_path / "forge").mkdir()
    path = tmp_path / "forge"
    added = cli("forge", "add", "gitdir", "forge", path.as_uri(), "--arg", f"path={path}")
    assert added.returncode == 0, added.stderr
    row = get_request(conn, int(added.stdout))
    assert (row["kind"], row["priority"], row["visit_type"]) == ("add_forge_now", 50, None)
    again = cli("forge", "add", "gitdir", "forge", path.as_uri(), "--arg", f"path={path}")
    assert again.returncode != 0 and "its listing is already request" in again.stderr
    bad = cli("forge", "add", "gitdir", "other", "not a url", "--arg", f"path={path}")
    assert bad.returncode != 0 and "url" in bad.stderr
    shown = cli("request", "show", added.stdout.strip()).stdout
    assert "kind: add_forge_now" in shown and "lister_id: " in shown
    assert "listing" in cli("request", "list").stdout


def test_a_one_shot_full_listing_task_is_add_forge_now(
    reference: Path,  # noqa: F811
    rpc_url: str,
    conn: DictConnection,
    tmp_path: Path,
) -> None:
    (tmp_path / "forge").mkdir()
    url = (tmp_path / "forge").as_uri()
    seen = run_client(reference, rpc_url, "forge", url, str(tmp_path / "forge"))
    assert (seen["status"], seen["priority"]) == ("next_run_scheduled", "high")
    task = conn.execute("select request_id from tasks where id = %s", (seen["id"],)).fetchone()
    assert task is not None
    row = get_request(conn, task["request_id"])
    assert (row["kind"], row["status"], row["priority"], row["url"]) == (
        "add_forge_now",
        "running",
        100,
        url,
    )
    schedule = conn.execute(
        "select l.name, l.instance_name, s.arguments from lister_schedules s"
        " join listers l on l.id = s.lister_id"
    ).fetchone()
    assert schedule == {
        "name": "gitdir",
        "instance_name": url,
        "arguments": {"path": str(tmp_path / "forge")},
    }
