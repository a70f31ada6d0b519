"""A visit message that waited in its queue past the scheduled cooldown is not
run: the scheduler presumed it lost and sends the origin again, so running it
could run two visits of one origin at once (the soak's last overlapping
visit). Real worker and journal processes."""

import time
from pathlib import Path

from actors.broker import make_broker
from app.db.connection import DictConnection
from app.domain.queue_names import lane_queue
from app.services.context import Context
from app.services.scheduling import VisitOrder
from app.settings import Settings
from queues.dramatiq_broker import enqueue_many, visit_message
from tests.integration.helpers import list_origins, stats_by_url
from tests.processes import running, wait_for

# A ladder unit of 300 s: the scheduled cooldown (7 units) is 35 minutes.
ENV = {"REVISIT_WORKER_VISIT_TYPES_ALLOW": '["simulated"]', "REVISIT_LADDER_UNIT_S": "300"}


def test_a_visit_queued_past_the_scheduled_cooldown_is_skipped_and_a_fresh_one_runs(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    conn.execute("insert into visit_types (name, max_queue_length) values ('simulated', 5)")
    stale_url, fresh_url = "sim://stale", "sim://fresh"
    list_origins(conn, ctx, [stale_url, fresh_url], visit_type="simulated")
    ids = {url: int(row["id"]) for url, row in stats_by_url(conn).items()}  # type: ignore[call-overload]
    now = time.time()
    queue = lane_queue("simulated", "express")
    orders = [
        VisitOrder(ids[stale_url], stale_url, "simulated", {}, 1, now - 3600),  # sent an hour ago
        VisitOrder(ids[fresh_url], fresh_url, "simulated", {}, 2, now),
    ]
    broker = make_broker(settings)
    broker.declare_queue(queue)
    enqueue_many(broker, [visit_message(queue, o, "express", 60.0) for o in orders])
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = {
        "worker": ["revisit", "worker", "--lane", "express", "--threads", "1"],
        "journal": ["revisit", "journal"],
    }
    with running(procs, ENV, logs):
        wait_for(
            lambda: stats_by_url(conn)[fresh_url]["last_visit_status"] is not None,
            60,
            "the fresh visit to be recorded",
            logs,
        )
        # The stale message went first (one thread, queue order): nothing of it
        # reached the journal, not even its 'created' status.
        time.sleep(1.0)
    assert stats_by_url(conn)[stale_url]["last_visit"] is None
    assert "waited past the scheduled cooldown" in (logs / "worker.log").read_text()
