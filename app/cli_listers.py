"""``revisit`` commands of the lister processes: the RPC server, lister schedules,
runs and their worker. Registered on the main app by ``app.cli``."""

from __future__ import annotations

import logging
import os
import signal
import threading

import typer

from app.listers.settings import get_lister_settings
from app.settings import get_settings


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


def rpc() -> None:
    """Serve the reference scheduler's RPC protocol (lister interface) on
    REVISIT_RPC_HOST:REVISIT_RPC_PORT (127.0.0.1:5008)."""
    from app.rpc.server import make_server, serve_until
    from monitoring.metrics import serve

    _setup_logging()
    settings, lister_settings = get_settings(), get_lister_settings()
    serve(lister_settings.rpc_metrics_port, settings.metrics_address)
    serve_until(make_server(settings, lister_settings), _stop_on_signal())


def register(app: typer.Typer, lister_app: typer.Typer) -> None:
    """Add these commands to the ``revisit`` app and its ``lister`` group."""
    app.command("rpc")(rpc)
