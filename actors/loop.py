"""Running a long-lived process's step at a fixed pace until told to stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg

from app.db.errors import is_unavailable
from app.domain.backoff import Backoff
from queues import errors as redis_errors

#: Longest wait between two attempts while a server is away.
MAX_RETRY_DELAY_S = 30.0
#: First wait after a failure of a step that runs back to back (``interval_s`` 0).
MIN_RETRY_DELAY_S = 0.5


def run_every(
    step: Callable[[datetime], object],
    interval_s: float,
    stop: threading.Event,
    log: logging.Logger,
    what: str = "step",
    server_of: Callable[[BaseException], str | None] | None = None,
) -> None:
    """Call ``step(now)`` every ``interval_s`` until ``stop`` is set.

    A failed step is logged and tried again, never fatal: after waits that
    double from ``interval_s`` (or ``MIN_RETRY_DELAY_S``) up to
    ``MAX_RETRY_DELAY_S`` while it keeps failing (a server away), at the usual
    pace once it succeeds. A server away (``server_of``, by default
    ``unavailable_server``, names it) is one line without a traceback;
    anything else is logged with its traceback.
    """
    server_of = server_of or unavailable_server
    first_s = interval_s or MIN_RETRY_DELAY_S
    backoff = Backoff(first_s, max(first_s, MAX_RETRY_DELAY_S))
    while not stop.is_set():
        started = time.monotonic()
        try:
            step(datetime.now(tz=UTC))
        except Exception as exc:
            delay_s = backoff.next_delay_s()
            server = server_of(exc)
            if server is None:
                log.exception("%s failed; retrying in %.1fs", what, delay_s)
            else:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                log.warning(
                    "%s failed, %s unavailable (%s); retrying in %.1fs",
                    what,
                    server,
                    first,
                    delay_s,
                )
            stop.wait(delay_s)
            continue
        backoff.reset()
        stop.wait(max(0.0, interval_s - (time.monotonic() - started)))


def unavailable_server(exc: BaseException) -> str | None:
    """The server ``exc`` says is away ("PostgreSQL", "Redis"), None if it says
    something else (a bug, a refused value)."""
    if isinstance(exc, psycopg.Error) and is_unavailable(exc):
        return "PostgreSQL"
    if redis_errors.is_unavailable(exc):
        return "Redis"
    return None
