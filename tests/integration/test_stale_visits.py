"""A visit message that waited in its queue past the scheduled cooldown is not
run: the scheduler presumed it lost and sends the origin again, so running it
could run two visits of one origin at once (the soak's last overlapping
visit). Real worker and journal processes."""

import time
from pathlib import Path

from actors.broker import make_broker
from app.db.connection import DictConnection
from app.domain.lanes import Lane
from app.domain.queue_names import lane_queue
from app.services.context import Context
from app.services.scheduling import VisitOrder
from app.settings import Settings
from queues.dramatiq_broker import enqueue_many, visit_message
from tests.integration.helpers import list_origins, stats_by_url
from tests.processes import running, wait_for

# A ladder unit of 300 s: the scheduled cooldown (7 units) is 35 minutes.
ENV = {"REVISIT_WORKER_VISIT_TYPES_ALLOW": '["simulated"]', "REVISIT_LADDER_UNIT_S": "300"}


def run_both(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    lane: Lane,
    stale_s: float,
    request_ids: tuple[int | None, int | None],
    logs: Path,
) -> str:
    """Send a visit of sim://stale sent ``stale_s`` ago then a fresh one of
    sim://fresh (requests ``request_ids``, or recurrent visits) to ``lane`` of
    the 'simulated' visit type with a time limit of 60 s, and run a worker of
    one thread until the fresh visit is recorded; the worker's log."""
    conn.execute("insert into visit_types (name, max_queue_length) values ('simulated', 5)")
    urls = ["sim://stale", "sim://fresh"]
    list_origins(conn, ctx, urls, visit_type="simulated")
    ids = {url: int(row["id"]) for url, row in stats_by_url(conn).items()}  # type: ignore[call-overload]
    now = time.time()
    orders = [
        VisitOrder(ids[url], url, "simulated", {}, i + 1, at, request_id=request_id)
        for i, (url, at, request_id) in enumerate(
            zip(urls, (now - stale_s, now), request_ids, strict=True)
        )
    ]
    queue = lane_queue("simulated", lane)
    broker = make_broker(settings)
    broker.declare_queue(queue)
    enqueue_many(broker, [visit_message(queue, o, lane, 60.0) for o in orders])
    logs.mkdir()
    procs = {
        "worker": ["revisit", "worker", "--lane", lane, "--threads", "1"],
        "journal": ["revisit", "journal"],
    }
    with running(procs, ENV, logs):
        wait_for(
            lambda: stats_by_url(conn)["sim://fresh"]["last_visit_status"] is not None,
            60,
            "the fresh visit to be recorded",
            logs,
        )
        # The stale message went first (one thread, queue order): nothing of it
        # reached the journal, not even its 'created' status.
        time.sleep(1.0)
    assert stats_by_url(conn)["sim://stale"]["last_visit"] is None
    return (logs / "worker.log").read_text()


def test_a_visit_queued_past_the_scheduled_cooldown_is_skipped_and_a_fresh_one_runs(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    # sent an hour ago
    log = run_both(settings, conn, ctx, "express", 3600, (None, None), tmp_path / "logs")
    assert "waited past the scheduled cooldown" in log


def test_a_request_visit_queued_past_its_deadline_is_skipped_and_a_fresh_one_runs(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    # A time limit of 60 s: the request is sent again 120 s after it was sent.
    log = run_both(settings, conn, ctx, "priority", 115, (41, 42), tmp_path / "logs")
    assert "waited past the deadline of request 41" in log
