"""The lister worker module: ``dramatiq actors.listers --queues revisit.listers``.

Declares the lister queue and the ``run_lister`` actor, which runs one
scheduled lister run (``app.listers.runs.execute_run``). Its outcome,
failure included, is recorded by the run itself and moves the schedule
(backoff after failures), so Dramatiq retries a run only when PostgreSQL
could not be reached (with backoff, up to 10 times).
"""

from __future__ import annotations

import logging
import random

import dramatiq
import psycopg

from actors.broker import connection, context, make_broker, utc_now
from app.domain.queue_names import LISTER_QUEUE
from app.listers.runs import LISTER_RUN_TIMEOUT_S, execute_run
from app.settings import get_settings
from monitoring.metrics import LISTER_ORIGINS, LISTER_RUNS

log = logging.getLogger("revisit.listers")
broker = make_broker(get_settings())
broker.declare_queue(LISTER_QUEUE)


def _database_away(retries: int, exc: BaseException) -> bool:
    """Retry a run that could not reach PostgreSQL (a lister's own failure is its
    run's outcome and never raised here)."""
    return retries < DATABASE_RETRIES and isinstance(exc, psycopg.OperationalError)


DATABASE_RETRIES = 10


@dramatiq.actor(
    queue_name=LISTER_QUEUE,
    retry_when=_database_away,
    min_backoff=1000,
    max_backoff=60_000,
    time_limit=int(LISTER_RUN_TIMEOUT_S * 1000),
)
def run_lister(run_id: int) -> None:
    """Run one lister run (sent by the lister scheduler) and record its outcome."""
    with connection() as conn:
        outcome = execute_run(conn, context(), run_id, utc_now, random.Random())
    if outcome is None:
        log.info("run %d: no longer due (lost and re-sent, or already running)", run_id)
        return
    LISTER_RUNS.labels(outcome.lister, "succeeded" if outcome.succeeded else "failed").inc()
    LISTER_ORIGINS.labels(outcome.lister).inc(outcome.origins_listed)
    name, kind = outcome.lister, "full" if outcome.full else "incremental"
    if outcome.succeeded:
        log.info("run %d: %s %s listing: %d origins", run_id, name, kind, outcome.origins_listed)
    else:
        log.warning("run %d: %s %s listing failed: %s", run_id, name, kind, outcome.error)
