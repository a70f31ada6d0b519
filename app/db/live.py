"""A PostgreSQL connection that is opened again after it is lost.

Long-running loops (the scheduler) hold one connection for their whole life;
when PostgreSQL restarts, that connection is closed for good. ``LiveConnection``
opens it on first use (so a process can start before PostgreSQL is up) and
again on the first use after a loss. ``RetryingConnections`` runs work on
several such connections until PostgreSQL answers (the journal's writers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import psycopg

from app.db.connection import DictConnection, connect
from app.db.errors import is_unavailable
from app.settings import Settings

log = logging.getLogger("revisit.db")
T = TypeVar("T")


class LiveConnection:
    """One connection, opened lazily and re-opened when found closed or dropped."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._conn: DictConnection | None = None
        #: Connections opened so far (more than one: PostgreSQL was lost and found again).
        self.opened = 0

    def get(self) -> DictConnection:
        """The open connection; opens a new one if there is none (raises if PostgreSQL is down)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.drop()
            self._conn = connect(self.settings)
            self.opened += 1
            if self.opened > 1:
                log.info("reconnected to PostgreSQL")
        return self._conn

    def drop(self) -> None:
        """Close and forget the connection, e.g. after an error that may have broken it."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("closing a broken connection failed", exc_info=True)


class RetryingConnections:
    """``count`` live connections, on which work is run until PostgreSQL answers.

    A deadlock or serialization failure (another writer won) is retried at once;
    a lost server is reconnected with doubling delays up to ``max_delay_s``,
    until ``wait`` (given the delay) says to stop. A refused value is raised:
    the caller decides what to do with it. ``on_retry`` is told each retry's
    cause, ``"conflict"`` or ``"reconnect"``. Their sessions are in UTC, as
    every ``connect``'s (the journal reads a dozen timestamps per origin).
    """

    def __init__(
        self,
        settings: Settings,
        count: int,
        wait: Callable[[float], bool],
        on_retry: Callable[[str], None] = lambda cause: None,
        max_delay_s: float = 30.0,
    ) -> None:
        self.live = [LiveConnection(settings) for _ in range(max(1, count))]
        self.wait = wait
        self.on_retry = on_retry
        self.max_delay_s = max_delay_s

    def run(self, work: Callable[[DictConnection], T], index: int = 0) -> T:
        """Run ``work`` on connection ``index``, reconnecting and retrying until it succeeds."""
        delay_s = 0.5
        while True:
            try:
                return work(self.live[index].get())
            except psycopg.errors.TransactionRollback as exc:
                self.on_retry("conflict")
                log.info("retrying after a conflict: %s", exc)
            except psycopg.OperationalError as exc:
                if not is_unavailable(exc):
                    raise
                self.on_retry("reconnect")
                log.warning("PostgreSQL unavailable (%s); retrying in %.1fs", exc, delay_s)
                self.live[index].drop()
                if self.wait(delay_s):
                    raise
                delay_s = min(delay_s * 2, self.max_delay_s)

    def close(self) -> None:
        """Close every connection."""
        for live in self.live:
            live.drop()
