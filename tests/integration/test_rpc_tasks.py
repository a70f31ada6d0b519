"""The task API and the runner's endpoints through the reference scheduler's own
client (swh-scheduler 3.6.0): save code now as the archive's web frontend does it,
followed to the end of its visit by real workers, and grab_next as its runner
calls it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.devtools.demo import make_repo
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.requests import retry_request
from app.settings import Settings
from tests.integration.helpers import list_origins, recurrent_backlog, serve_requests
from tests.integration.test_rpc_reference_client import reference  # noqa: F401
from tests.integration.test_rpc_reference_client import run_client as run_reference

CLIENT = Path(__file__).resolve().parents[1] / "reference" / "task_client.py"


def run_client(python: Path, url: str, *args: str) -> dict[str, object]:
    return run_reference(python, url, *args, client=CLIENT)


def request_status(conn: DictConnection, task_id: int) -> str:
    row = conn.execute(
        "select r.status::text as status from tasks t"
        " join visit_requests r on r.id = t.request_id where t.id = %s",
        (task_id,),
    ).fetchone()
    assert row is not None
    return str(row["status"])


def test_a_save_code_now_task_is_visited_ahead_of_the_backlog_and_its_run_ends_as_the_reference_says(  # noqa: E501
    reference: Path,  # noqa: F811
    rpc_url: str,
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    tmp_path: Path,
) -> None:
    loop, express, backlog = recurrent_backlog(settings, conn, ctx, 2000)
    wanted = make_repo(tmp_path / "wanted")
    missing = (tmp_path / "missing").as_uri()

    saved = run_client(reference, rpc_url, "save", wanted, missing)
    assert "load-git" in saved["load_types"]  # type: ignore[operator]
    assert saved["git_queue_length"] == 1000 and saved["missing_type"] is True
    # task_type/create made the visit type, and the task type reads back as declared
    extra = saved["extra"]
    assert isinstance(extra, dict) and extra["max_queue_length"] == 7
    assert (extra["backend_name"], extra["backoff_factor"]) == ("x", 1.5)
    assert extra["default_interval"] == "2 days, 0:00:00"
    assert extra["num_retries"] is None and extra["retry_delay"] is None  # declared unset
    made = conn.execute("select num_retries from visit_types where name = 'extra'").fetchone()
    assert made == {"num_retries": 3}  # revisit's default applies
    assert "revisit creates only load-<visit type> task types" in str(saved["other_type"])
    assert saved["list_types"] == ["list-gitdir-full", "list-gitdir-incremental"]
    tasks = saved["tasks"]
    assert isinstance(tasks, list) and len(tasks) == 2
    assert {(t["status"], t["priority"], t["policy"]) for t in tasks} == {
        ("next_run_not_scheduled", "high", "oneshot")
    }
    assert tasks[0]["kwargs"] == {"url": wanted}
    ids = [str(t["id"]) for t in tasks]
    before = run_client(reference, rpc_url, "follow", *ids)
    assert before["runs"] == {}  # nothing sent to a worker yet

    loop.step(datetime.now(tz=UTC))  # the requests go to the priority queue
    sent = run_client(reference, rpc_url, "follow", *ids)
    assert sent["tasks"] == dict.fromkeys(ids, "next_run_scheduled")
    assert sent["runs"] == dict.fromkeys(ids, "scheduled")

    serve_requests(
        tmp_path,
        lambda: {request_status(conn, int(i)) for i in ids} == {"succeeded", "failed"},
        "both tasks' visits to end",
    )
    done = run_client(reference, rpc_url, "follow", *ids)
    assert done["tasks"] == {ids[0]: "completed", ids[1]: "disabled"}
    assert done["runs"] == {ids[0]: "eventful", ids[1]: "failed"}
    assert done["completed"] == [int(ids[0])]
    assert done["high"] == [int(i) for i in ids]
    # nobody consumed the recurrent backlog: the requests went around it
    assert loop.broker.client.hlen(express.messages) == backlog


def test_tasks_revisit_cannot_run_are_refused_with_why_and_nothing_written_and_a_disabled_one_is_cancelled(  # noqa: E501
    reference: Path,  # noqa: F811
    rpc_url: str,
    conn: DictConnection,
) -> None:
    seen = run_client(reference, rpc_url, "refused", "https://forge.example/a.git")
    assert "tasks[1].policy: recurring: revisit keeps no recurring load tasks" in str(
        seen["recurring"]
    )
    assert "tasks[1].type: unknown task type 'load-bzr' (known: load-git" in str(
        seen["unknown_type"]
    )
    assert "tasks[1].arguments.kwargs.url: required" in str(seen["no_url"])
    assert "tasks[1].arguments: RequestVisit: url:" in str(seen["bad_url"])
    assert "revisit lister schedule gitdir" in str(seen["lister"])
    assert "tasks[1].arguments.kwargs.url: required, the forge's URL" in str(
        seen["forge_without_url"]
    )
    assert seen["remaining"] == 0
    # then one accepted and disabled: its request is cancelled before any run
    assert (seen["disabled"], seen["disabled_runs"]) == (["disabled"], 0)
    statuses = conn.execute("select status::text from visit_requests").fetchall()
    assert statuses == [{"status": "aborted"}]
    assert str(seen["grab_ready"]).startswith("501 task/grab_ready: not served by revisit")


def test_the_runners_grab_next_takes_origins_from_the_mirror_once(
    reference: Path,  # noqa: F811
    rpc_url: str,
    conn: DictConnection,
    ctx: Context,
) -> None:
    urls = [f"https://forge.example/{i}.git" for i in range(5)]
    list_origins(conn, ctx, urls)
    seen = run_client(reference, rpc_url, "grab", "git", "10", "never_visited_oldest_update_first")
    assert sorted(seen["urls"]) == sorted(urls)  # type: ignore[type-var]
    assert seen["again"] == []  # in flight: not taken twice
    lister = conn.execute("select id from listers").fetchone()
    assert lister is not None and seen["lister_ids"] == [str(lister["id"])]
    stamped = conn.execute(
        "select count(*) as n from origin_visit_stats where last_scheduled is not null"
    ).fetchone()
    assert stamped == {"n": 5}
    sizes = ctx.mirror.sizes("git")
    assert sizes["inflight"] == 5 and sum(sizes.values()) == 5  # taken from the pools
    assert seen["position"] == 1_800_000_000
    assert str(seen["bad_policy"]).startswith("UnknownPolicy: origins/grab_next: policy: unknown")


def test_recurring_lister_tasks_become_the_listers_schedule_and_are_reported_and_paused(
    reference: Path,  # noqa: F811
    rpc_url: str,
    conn: DictConnection,
    tmp_path: Path,
) -> None:
    seen = run_client(reference, rpc_url, "lister", str(tmp_path))

    assert seen["created"] == [
        ["list-gitdir-full", "recurring", "next_run_not_scheduled", 2 * 86400.0],
        ["list-gitdir-incremental", "recurring", "next_run_not_scheduled", 3600.0],
    ]
    schedule = conn.execute(
        "select l.name, l.instance_name, s.arguments, extract(epoch from s.full_interval) as f,"
        " extract(epoch from s.incremental_interval) as i, s.enabled"
        " from lister_schedules s join listers l on l.id = s.lister_id"
    ).fetchall()
    assert schedule == [
        {
            "name": "gitdir",
            "instance_name": "local",
            "arguments": {"path": str(tmp_path)},
            "f": 2 * 86400,
            "i": 3600,
            "enabled": False,  # disable_tasks paused it
        }
    ]
    refused = seen["refused"]
    assert isinstance(refused, dict)
    assert "tasks[0].current_interval: required" in refused["no_interval"]
    assert "tasks[0]: " in refused["unknown_lister"] and "gitdir" in refused["unknown_lister"]
    assert "colour" in refused["bad_argument"]
    assert len(seen["searched"]) == 2 and seen["oneshot"] == 0  # type: ignore[arg-type]
    assert seen["disabled"] == ["disabled", "disabled"]  # one schedule, paused


def test_a_retried_request_s_task_follows_the_retry(
    reference: Path,  # noqa: F811
    rpc_url: str,
    conn: DictConnection,
    tmp_path: Path,
) -> None:
    saved = run_client(reference, rpc_url, "save", make_repo(tmp_path / "r"))
    task_id = saved["tasks"][0]["id"]  # type: ignore[index]
    conn.execute("update visit_requests set status = 'failed', finished_at = now()")
    assert run_client(reference, rpc_url, "follow", str(task_id))["tasks"] == {
        str(task_id): "disabled"
    }
    (failed,) = conn.execute("select id from visit_requests").fetchall()
    retry_request(conn, failed["id"])

    followed = run_client(reference, rpc_url, "follow", str(task_id))

    assert followed["tasks"] == {str(task_id): "next_run_not_scheduled"}  # the retry, pending


def test_the_first_visits_runner_grabs_one_listers_origins_not_yet_scheduled(
    reference: Path,  # noqa: F811
    rpc_url: str,
    conn: DictConnection,
    ctx: Context,
) -> None:
    urls = [f"https://forge.example/{i}.git" for i in range(4)]
    list_origins(conn, ctx, urls)  # lister test/forge
    other = register_lister(conn, "other", "forge", None)
    rows = [(1, ListedOriginIn(url="https://other.example/o.git", visit_type="git"))]
    record_listed_origins(conn, ctx, other, rows, datetime.now(tz=UTC))

    seen = run_client(reference, rpc_url, "first", "git", "test", "forge")

    assert sorted(seen["urls"]) == urls  # type: ignore[type-var]
    lister = conn.execute("select id from listers where name = 'test'").fetchone()
    assert lister is not None and seen["lister_ids"] == [str(lister["id"])]
    assert seen["again"] == []  # stamped and in flight
    assert ctx.mirror.sizes("git")["inflight"] == 4
