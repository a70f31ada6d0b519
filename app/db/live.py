"""A PostgreSQL connection that is opened again after it is lost.

Long-running loops (the scheduler) hold one connection for their whole life;
when PostgreSQL restarts, that connection is closed for good. ``LiveConnection``
opens it on first use (so a process can start before PostgreSQL is up) and
again on the first use after a loss.
"""

from __future__ import annotations

import logging

import psycopg

from app.db.connection import DictConnection, connect
from app.settings import Settings

log = logging.getLogger("revisit.db")


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
