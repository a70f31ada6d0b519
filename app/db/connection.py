"""PostgreSQL connections: how each is opened, and how a process keeps them.

A command opens one with ``connect`` for its run. A long-running process
(scheduler, journal client, API and lister workers, RPC server, metrics
refresh) holds ``Connections``: opened on first use, so it starts before
PostgreSQL is up; reused from one step or message to the next; and replaced
when lost, so it outlives PostgreSQL's restarts. ``Connections.run`` also
waits out an outage with bounded backoff (the journal's batches).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from app.db.errors import is_conflict, is_unavailable
from app.domain.backoff import Backoff
from app.settings import ConfigFileError, Settings

DictConnection = psycopg.Connection[dict[str, Any]]
T = TypeVar("T")
log = logging.getLogger("revisit.db")
#: Longest wait between two attempts of ``Connections.run`` while PostgreSQL is away.
MAX_RETRY_DELAY_S = 30.0


def connect(settings: Settings, *, autocommit: bool = True) -> DictConnection:
    """A new connection whose rows come back as dicts, its session in UTC.

    Autocommit by default: every write path opens an explicit transaction, so
    no statement leaves a transaction (and its row locks) open by accident.
    The session's time zone is UTC from the start (``utc_options``): psycopg
    builds a UTC timestamptz in C, and any other zone (``Etc/UTC`` included)
    through zoneinfo, on paths that read a dozen dates per origin. No
    statement depends on the zone (no ``::date``, ``date_trunc`` or ``at time
    zone``; a timestamp plus an interval of days, as a lister's next run,
    takes days of 24 hours, as Python's timedelta).
    """
    dsn = settings.database_dsn()
    try:
        options = utc_options(dsn)
    except psycopg.ProgrammingError as exc:
        # Its text may quote the string, and so a password: quotes are elided.
        reason = re.sub(r'"[^"]*"', '"..."', str(exc).splitlines()[0])
        raise ConfigFileError(
            "REVISIT_DATABASE_URL: not a libpq connection string "
            f"(postgresql://user@host:port/db): {reason}"
        ) from None
    return psycopg.connect(
        dsn,
        row_factory=dict_row,
        autocommit=autocommit,
        # Statements here run a few times each with large arrays: preparing them
        # costs more client time (psycopg keys each by its text) than it saves.
        prepare_threshold=None,
        options=options,
    )


def utc_options(dsn: str) -> str:
    """The connection's ``options`` (from ``dsn``, else PGOPTIONS) with the session
    time zone set to UTC, so that no option an operator gives is lost."""
    given = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
    return f"{given} -c TimeZone=UTC".strip()


class Connections:
    """Up to ``size`` connections shared by a process's threads (``None``: one per
    thread borrowing at the same time, however many).

    A connection is opened at its first borrow, checked with an empty query
    before each later one (a connection PostgreSQL dropped while idle fails
    there, not in the borrower's work), and closed instead of kept when it is
    closed, broken or left inside a transaction: the next borrow opens a new
    one. Every one comes from ``connect``: dict rows, a UTC session, the
    operator's options.
    """

    def __init__(self, settings: Settings, size: int | None = 1) -> None:
        self.settings = settings
        self.size = None if size is None else max(1, size)
        self._idle: queue.LifoQueue[DictConnection | None] = queue.LifoQueue()
        for _ in range(self.size or 0):
            self._idle.put(None)
        #: Connections opened so far (more than ``size``: some were lost and replaced).
        self.opened = 0

    @contextlib.contextmanager
    def borrow(self) -> Iterator[DictConnection]:
        """An open connection for the caller's work, given back afterwards (a borrower
        waits while all ``size`` are lent); raises if PostgreSQL cannot be reached."""
        try:
            conn = self._idle.get(block=self.size is not None)
        except queue.Empty:
            conn = None
        try:
            conn = self._checked(conn)
            yield conn
        finally:
            if not _reusable(conn):
                _closed(conn)
                conn = None
            self._idle.put(conn)

    def run(
        self,
        work: Callable[[DictConnection], T],
        wait: Callable[[float], bool],
        on_retry: Callable[[str], None] = lambda cause: None,
    ) -> T:
        """Run ``work`` on a borrowed connection until PostgreSQL answers.

        A deadlock or serialization failure (another writer won) is retried at
        once; a lost server with bounded backoff, until ``wait`` (given the
        delay) says to stop; a refused value is raised, the caller decides what
        to do with it. ``on_retry`` is told each retry's cause, ``"conflict"`` or
        ``"reconnect"``.
        """
        backoff = Backoff(0.5, MAX_RETRY_DELAY_S)
        while True:
            try:
                with self.borrow() as conn:
                    return work(conn)
            except psycopg.OperationalError as exc:
                if is_conflict(exc):
                    on_retry("conflict")
                    log.info("retrying after a conflict: %s", exc)
                    continue
                if not is_unavailable(exc):
                    raise
                on_retry("reconnect")
                delay_s = backoff.next_delay_s()
                log.warning("PostgreSQL unavailable (%s); retrying in %.1fs", exc, delay_s)
                if wait(delay_s):
                    raise

    def close(self) -> None:
        """Close every idle connection (a later borrow opens a new one)."""
        idle = []
        with contextlib.suppress(queue.Empty):
            while True:
                idle.append(self._idle.get_nowait())
        for conn in idle:
            _closed(conn)
            self._idle.put(None)

    def _checked(self, conn: DictConnection | None) -> DictConnection:
        if conn is not None:
            try:
                conn.execute("")
                return conn
            except psycopg.OperationalError as exc:
                log.info("a connection to PostgreSQL was lost (%s); opening another", exc)
                _closed(conn)
        conn = connect(self.settings)
        self.opened += 1
        return conn


#: Times ``in_transaction`` runs its work when PostgreSQL aborts it for a conflict.
CONFLICT_ATTEMPTS = 5
#: Pause before the first retry of ``in_transaction`` (longer before each next one).
CONFLICT_PAUSE_S = 0.1


def in_transaction(conn: DictConnection, work: Callable[[DictConnection], T]) -> T:
    """``work`` in one transaction of ``conn``, run again (``CONFLICT_ATTEMPTS`` times
    in all) when PostgreSQL aborts it for a deadlock or a serialization failure,
    after a pause that lets the other writer take the rows it waited for
    (retried at once, this one could take them back first and deadlock again)."""
    attempt = 1
    while True:
        try:
            with conn.transaction():
                return work(conn)
        except psycopg.OperationalError as exc:
            if not is_conflict(exc) or attempt == CONFLICT_ATTEMPTS:
                raise
            log.info("retrying after a conflict: %s", str(exc).splitlines()[0])
            time.sleep(CONFLICT_PAUSE_S * attempt)
            attempt += 1


def _reusable(conn: DictConnection | None) -> bool:
    return (
        conn is not None
        and not conn.closed
        and not conn.broken
        and conn.info.transaction_status == TransactionStatus.IDLE
    )


def _closed(conn: DictConnection | None) -> None:
    """Close ``conn`` (if any) whatever its state."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            log.debug("closing a broken connection failed", exc_info=True)
