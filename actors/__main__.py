"""``python -m actors PROCESS [ARGS]``: become one of revisit's long-running processes.

The ``revisit`` commands that start a process (``scheduler``, ``journal``,
``rpc``, ``lister scheduler``) check their options and ports, then replace
themselves with this entry point, so that the command line imports no process
code and no metrics (the layering in the README); the Dramatiq pools of
``worker``, ``api`` and ``lister worker`` become ``python -m dramatiq``
directly. Each process serves its /metrics
and stops cleanly on SIGTERM or SIGINT. ``revisit journal --processes N``
becomes ``journal-group N``, a supervisor of N ``journal-member`` processes
that serves their /metrics.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.settings import Settings

#: Processes that run beside others of their kind: their lines say which one.
WITH_PID = ("journal-group", "journal-member")


def _setup_logging(with_pid: bool = False) -> None:
    name = "%(name)s[%(process)d]" if with_pid else "%(name)s"
    logging.basicConfig(
        level=os.environ.get("REVISIT_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s {name} %(levelname)s %(message)s",
    )


def _stop_on_signal() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


def _table_visit_types(settings: Settings) -> set[str]:
    """The visit types of the table, or none while PostgreSQL is away (the process
    waits for it; their series are then created at their first change)."""
    import psycopg

    from app.db.connection import connect
    from app.db.listings import known_visit_types

    try:
        with connect(settings) as conn:
            return known_visit_types(conn)
    except psycopg.OperationalError:
        return set()


def scheduler(args: list[str]) -> None:
    """The scheduler: keep every visit queue fed from the Redis pools."""
    from actors.loop import run_every
    from actors.scheduler import SchedulerLoop
    from app.settings import get_settings
    from monitoring.coverage import REFRESH_INTERVAL_S
    from monitoring.process import serve_scheduler

    settings = get_settings()
    stop = _stop_on_signal()
    refresher = serve_scheduler(settings, datetime.now(tz=UTC))
    log = logging.getLogger("revisit.metrics")
    refresh = functools.partial(
        run_every, refresher.refresh, REFRESH_INTERVAL_S, stop, log, "metrics refresh"
    )
    threading.Thread(target=refresh, name="metrics", daemon=True).start()
    SchedulerLoop(settings).run(stop)


def journal(args: list[str]) -> None:
    """The journal client: apply origin_visit_status messages to the visit stats."""
    from app.settings import get_settings
    from monitoring.process import serve_journal

    settings = get_settings()
    serve_journal(settings, _table_visit_types(settings))
    _run_journal_client(_stop_on_signal())


def journal_member(args: list[str]) -> None:
    """One journal client of ``journal-group``: its metrics go to the group's
    multiprocess directory (served by the supervisor), and it stops with it."""
    from actors.supervisor import watch_parent
    from app.settings import get_settings
    from monitoring.process import start_journal_series

    stop = _stop_on_signal()
    watch_parent()
    start_journal_series(_table_visit_types(get_settings()))
    _run_journal_client(stop)


def _run_journal_client(stop: threading.Event) -> None:
    from actors.journal import JournalClient, tune_gc
    from app.settings import get_settings

    client = JournalClient(get_settings())
    tune_gc()
    client.run(stop)


def journal_group(args: list[str]) -> None:
    """``journal-group N``: N journal clients in one consumer group under a
    supervisor (actors/supervisor.py) that serves their summed /metrics."""
    from actors.supervisor import Supervisor
    from app.settings import get_settings
    from monitoring.multiprocess import MULTIPROC_ENV, mark_dead
    from monitoring.process import journal_group_dir, serve_journal_group

    settings = get_settings()
    processes = int(args[0])
    # In the background: the brokers may not be up yet, and the group must start.
    threading.Thread(target=_warn_idle_members, args=(settings, processes), daemon=True).start()
    argv = [sys.executable, "-P", "-m", "actors", "journal-member"]
    supervisor = Supervisor(argv, processes, dict(os.environ))
    if settings.metrics_port:
        directory = journal_group_dir(settings)
        supervisor.env[MULTIPROC_ENV] = str(directory)
        supervisor.on_exit = functools.partial(mark_dead, directory=directory)
        serve_journal_group(settings, directory)
    supervisor.install_signal_handlers()
    sys.exit(supervisor.run())


def _warn_idle_members(settings: Settings, processes: int) -> None:
    """Log a warning if the group has more processes than the journal topic has
    partitions (one the members will create has ``TOPIC_PARTITIONS``)."""
    from app.kafka.client import TOPIC_PARTITIONS, idle_members, topic_partitions

    topic = settings.journal_topic
    partitions = topic_partitions(settings, topic, timeout_s=30.0)
    if partitions == 0:  # not created yet: the members will create it
        partitions = TOPIC_PARTITIONS
    warning = idle_members(processes, partitions, topic)
    if warning:
        logging.getLogger("revisit.supervisor").warning(warning)


def lister_scheduler(args: list[str]) -> None:
    """The lister scheduler: send each scheduled lister's due runs to the lister queue."""
    from actors.lister_scheduler import ListerScheduler
    from app.settings import get_settings
    from monitoring.metrics import LISTER_SCHEDULER_OWNED, serve

    settings = get_settings()
    serve(settings.metrics_port, settings.metrics_address, LISTER_SCHEDULER_OWNED)
    ListerScheduler(settings).run(_stop_on_signal())


def rpc(args: list[str]) -> None:
    """The reference scheduler's RPC protocol (lister interface)."""
    from app.rpc.server import make_server, serve_until
    from app.settings import get_settings
    from monitoring.metrics import RPC_OWNED, RPC_REQUESTS, RPC_SECONDS, serve

    def observe(endpoint: str, status: int, seconds: float) -> None:
        RPC_REQUESTS.labels(endpoint, str(status)).inc()
        RPC_SECONDS.labels(endpoint).observe(seconds)

    settings = get_settings()
    serve(settings.metrics_port, settings.metrics_address, RPC_OWNED)
    serve_until(make_server(settings, observe), _stop_on_signal())


PROCESSES: dict[str, Callable[[list[str]], None]] = {
    "scheduler": scheduler,
    "journal": journal,
    "journal-group": journal_group,
    "journal-member": journal_member,
    "lister-scheduler": lister_scheduler,
    "rpc": rpc,
}


def main(argv: list[str]) -> None:
    """Run the process named by ``argv[0]`` with the rest as its arguments."""
    if not argv or argv[0] not in PROCESSES:
        sys.exit(f"usage: python -m actors {{{'|'.join(PROCESSES)}}} [ARGS]")
    _setup_logging(argv[0] in WITH_PID)
    PROCESSES[argv[0]](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
