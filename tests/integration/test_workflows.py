"""Aborting a running request, and the add forge now workflow (seed 004, issue
36), against real PostgreSQL, Redis, the journal and worker processes."""

from datetime import UTC, datetime
from pathlib import Path

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.inputs.api import RequestVisit
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.requests import cancel_request, create_request, get_request
from queues.keys import visit_outcomes
from tests.integration.helpers import stats_by_url
from tests.processes import running, wait_for, with_constants

SIMULATED = with_constants(
    {"actors.scheduler.POLL_INTERVAL_S": 0.2, "actors.abort.POLL_S": 0.1},
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
    # counted, and the origin is still in its pool
    stats = stats_by_url(conn)[url]
    assert (stats["failed_visits"], stats["last_final_date"]) == (0, None)
    assert (
        ctx.redis.hget(visit_outcomes(ctx.settings.redis_namespace, "simulated"), "failed") is None
    )
    assert sum(ctx.mirror.sizes("simulated").values()) == 1
