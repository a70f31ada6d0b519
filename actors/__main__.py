"""``python -m actors PROCESS [ARGS]``: become one of revisit's long-running processes.

The ``revisit`` commands that start a process (``scheduler``, ``journal``,
``rpc``, ``lister scheduler``, and the Dramatiq pools of ``worker``, ``api``
and ``lister worker``) check their options and ports, then replace themselves
with this entry point, so that the command line imports no process code and
no metrics (the layering in the README). Each process serves its /metrics
and stops cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable


def _setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("REVISIT_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


def _stop_on_signal() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


def scheduler(args: list[str]) -> None:
    """The scheduler: keep every visit queue fed from the Redis pools."""
    from actors.scheduler import SchedulerLoop
    from app.settings import get_settings
    from monitoring.process import serve_scheduler

    settings = get_settings()
    serve_scheduler(settings)
    loop = SchedulerLoop(settings)
    loop.run(_stop_on_signal())


def journal(args: list[str]) -> None:
    """The journal client: apply origin_visit_status messages to the visit stats."""
    from actors.journal import JournalClient, tune_gc
    from app.settings import get_settings
    from monitoring.process import serve_journal

    settings = get_settings()
    serve_journal(settings)
    client = JournalClient(settings)
    tune_gc()
    client.run(_stop_on_signal())


def lister_scheduler(args: list[str]) -> None:
    """The lister scheduler: send each scheduled lister's due runs to the lister queue."""
    from actors.lister_scheduler import ListerScheduler
    from app.listers.settings import get_lister_settings
    from app.settings import get_settings
    from monitoring.metrics import serve

    settings, lister_settings = get_settings(), get_lister_settings()
    serve(lister_settings.lister_scheduler_metrics_port, settings.metrics_address)
    ListerScheduler(settings, lister_settings).run(_stop_on_signal())


def rpc(args: list[str]) -> None:
    """The reference scheduler's RPC protocol (lister interface)."""
    from app.listers.settings import get_lister_settings
    from app.rpc.server import make_server, serve_until
    from app.settings import get_settings
    from monitoring.listers import RPC_REQUESTS, RPC_SECONDS
    from monitoring.metrics import serve

    def observe(endpoint: str, status: int, seconds: float) -> None:
        RPC_REQUESTS.labels(endpoint, str(status)).inc()
        RPC_SECONDS.labels(endpoint).observe(seconds)

    settings, lister_settings = get_settings(), get_lister_settings()
    serve(lister_settings.rpc_metrics_port, settings.metrics_address)
    serve_until(make_server(settings, lister_settings, observe), _stop_on_signal())


def dramatiq(args: list[str]) -> None:
    """A Dramatiq worker pool (``dramatiq MODULE OPTIONS``), its metrics set up first."""
    from app.settings import get_settings
    from monitoring.dramatiq_metrics import worker_metrics_env

    os.environ.update(worker_metrics_env(get_settings()))
    os.execv(sys.executable, [sys.executable, "-m", "dramatiq", *args])


PROCESSES: dict[str, Callable[[list[str]], None]] = {
    "scheduler": scheduler,
    "journal": journal,
    "lister-scheduler": lister_scheduler,
    "rpc": rpc,
    "dramatiq": dramatiq,
}


def main(argv: list[str]) -> None:
    """Run the process named by ``argv[0]`` with the rest as its arguments."""
    if not argv or argv[0] not in PROCESSES:
        sys.exit(f"usage: python -m actors {{{'|'.join(PROCESSES)}}} [ARGS]")
    _setup_logging()
    PROCESSES[argv[0]](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
