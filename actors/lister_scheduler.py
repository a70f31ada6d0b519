"""``revisit lister scheduler``: sends each scheduled lister's due runs to the lister queue.

One step claims the due runs in PostgreSQL (one statement; several
schedulers never claim the same schedule), then sends a ``run_lister``
message per run. A run that cannot be sent (Redis away) is given back at
once and claimed again by a later step; one claimed but never sent because
the process died in between is declared lost and sent again after
``LISTER_RUN_TIMEOUT_S`` (app.listers.runs).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

import dramatiq

from actors.loop import run_every
from app.db.connection import Connections
from app.db.lister_runs import release_run
from app.domain.queue_names import LISTER_QUEUE
from app.listers.runs import LISTER_RUN_TIMEOUT_S, ScheduledRun, claim_due_runs
from app.settings import Settings
from monitoring.metrics import LISTER_RUNS_SENT
from queues.dramatiq_broker import redis_broker

log = logging.getLogger("revisit.lister_scheduler")

#: How often the lister scheduler looks for due runs.
LISTER_POLL_INTERVAL_S = 5.0


def run_message(run_id: int) -> dramatiq.Message[None]:
    """The message of ``actors.listers.run_lister`` for one run."""
    return dramatiq.Message(
        queue_name=LISTER_QUEUE, actor_name="run_lister", args=(run_id,), kwargs={}, options={}
    )


class ListerScheduler:
    """The loop of the lister scheduler process; ``step`` is one iteration."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Connections(settings)
        # Its own broker on the configured Redis: not the module-level one of
        # actors.listers, which reads the process-wide settings at import.
        self.broker = redis_broker(settings)

    def step(self, now: datetime) -> list[ScheduledRun]:
        """Claim the runs due at ``now`` and send them; returns them."""
        timeout = timedelta(seconds=LISTER_RUN_TIMEOUT_S)
        with self.db.borrow() as conn:
            runs = claim_due_runs(conn, now, timeout)
            for index, run in enumerate(runs):
                try:
                    self.broker.enqueue(run_message(run.run_id))
                except Exception as exc:  # Redis away: give back what was not sent
                    for unsent in runs[index:]:
                        release_run(conn, unsent.run_id, now, f"not sent: {exc}"[:2000])
                    raise
                LISTER_RUNS_SENT.labels("full" if run.full else "incremental").inc()
                log.info("sent run %d of lister %s", run.run_id, run.lister_id)
        return runs

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop`` is set; a failed step (PostgreSQL or Redis away) is retried."""
        try:
            run_every(self.step, LISTER_POLL_INTERVAL_S, stop, log)
        finally:
            self.db.close()
