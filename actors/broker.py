"""The Dramatiq broker every revisit process shares (``queues.dramatiq_broker.redis_broker``),
with revisit's middleware."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
from datetime import UTC, datetime
from functools import lru_cache
from types import FrameType
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import Retries

from actors.dead_letter_reasons import DeadLetterReasons
from actors.undecodable import SweepUndecodable
from app.db.connection import Connections, DictConnection
from app.inputs.rules import without_userinfo
from app.loaders.zygote import die_with_parent
from app.services.context import Context, redis_client
from app.settings import Settings, get_settings
from monitoring.dramatiq_metrics import WorkerMetrics
from monitoring.multiprocess import in_multiprocess_mode
from queues.dramatiq_broker import LeaveOutOfDepth, redis_broker

#: Actors whose messages are sent to a visit's queue but are not visits: a final
#: status the visit could not publish in time (``actors.worker.publish_status``).
NOT_VISITS = frozenset({"publish_status"})


class DieWithParent(dramatiq.Middleware):
    """Each worker process of a Dramatiq pool is told to stop (SIGTERM, as the
    pool's main process would tell it) when that main process dies: killed
    (kill -9), it would otherwise leave its children running visits, orphans
    no one stops. (Its metrics exporter does the same: ``serve_worker_metrics``.)"""

    def after_process_boot(self, broker: Any) -> None:
        parent = multiprocessing.parent_process()
        if parent is not None and parent.pid is not None:
            log_to_stderr_when_orphaned(parent.pid)
        die_with_parent(signal.SIGTERM, parent.pid if parent else None)


class WithoutUserinfo(logging.Filter):
    """Redacts the credentials of the URLs in a record's message and traceback:
    Dramatiq logs a refused message with its arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # the handler reports a record it cannot format
            return True
        redacted = without_userinfo(text)
        if redacted != text:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = without_userinfo(logging.Formatter().formatException(record.exc_info))
        return True


def log_to_stderr_when_orphaned(parent_pid: int) -> None:
    """On SIGTERM once the process ``parent_pid`` is gone, write the logs and
    output to the inherited stderr, not to the pipe Dramatiq's main process read
    them from: this process holds the pipe's read end too (forked), so nothing
    would fail, and a full pipe would block its shutdown for good, an orphan."""
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != parent_pid:
            stderr = open(2, "w", buffering=1, errors="replace", closefd=False)  # noqa: SIM115
            loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
            for logger in loggers:
                for handler in getattr(logger, "handlers", []):
                    if isinstance(handler, logging.StreamHandler):
                        handler.stream = stderr  # no lock: its holder may be blocked
            sys.stdout = sys.stderr = stderr
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_term)


def make_broker(settings: Settings) -> RedisBroker:
    """A Redis broker configured from ``settings``, set as Dramatiq's global broker.

    Its Prometheus middleware is added only in the processes started with a
    multiprocess directory (``revisit worker`` and ``revisit api``). The handlers
    of the process's logs, set up by then, get the ``WithoutUserinfo`` filter.
    """
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, WithoutUserinfo) for f in handler.filters):
            handler.addFilter(WithoutUserinfo())
    broker = redis_broker(settings)
    if in_multiprocess_mode():
        broker.add_middleware(WorkerMetrics())
    broker.add_middleware(LeaveOutOfDepth(NOT_VISITS))
    broker.add_middleware(DieWithParent())
    # "after" hooks run in reverse order: placed before Retries, it sees the
    # message Retries has just given up on.
    broker.add_middleware(
        DeadLetterReasons(redis_client(settings), settings.redis_namespace),
        before=Retries,
    )
    broker.add_middleware(SweepUndecodable(redis_client(settings), settings.redis_namespace))
    dramatiq.set_broker(broker)
    return broker


@lru_cache(maxsize=1)
def context() -> Context:
    """The handles the actors of a Dramatiq process share (Redis, the mirror)."""
    return Context.from_settings(get_settings())


def connection() -> contextlib.AbstractContextManager[DictConnection]:
    """A PostgreSQL connection of the process's pool, shared by its actors: one per
    worker thread at work, kept from one message to the next, replaced when lost."""
    return _connections().borrow()


@lru_cache(maxsize=1)
def _connections() -> Connections:
    return Connections(get_settings(), size=None)


def utc_now() -> datetime:
    """Now, in UTC."""
    return datetime.now(tz=UTC)
