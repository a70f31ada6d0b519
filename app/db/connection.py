"""Opening PostgreSQL connections."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from app.settings import Settings

DictConnection = psycopg.Connection[dict[str, Any]]


def connect(settings: Settings, *, autocommit: bool = True) -> DictConnection:
    """A new connection whose rows come back as dicts, its session in UTC.

    Autocommit by default: every write path opens an explicit transaction, so
    no statement leaves a transaction (and its row locks) open by accident.
    The session's time zone is UTC from the start (``utc_options``): psycopg
    gives each timestamptz it reads the session's time zone, and for UTC it
    builds the date in C, where for any other zone name (``Etc/UTC``
    included) it converts each one through zoneinfo, which also makes
    turning the date into a mirror score (``epoch_s``) slower. A journal
    batch reads a dozen timestamps per origin, a
    rebuild or a listing batch a few. The instants are the same, and no
    statement depends on the zone (no ``::date``, ``date_trunc`` or ``at time
    zone``; a timestamp plus an interval of days, as a lister's next run,
    takes days of 24 hours, as Python's timedelta).
    """
    dsn = settings.database_dsn()
    return psycopg.connect(
        dsn,
        row_factory=dict_row,
        autocommit=autocommit,
        # Statements here run a few times each with large arrays: preparing them
        # costs more client time (psycopg keys each by its text) than it saves.
        prepare_threshold=None,
        options=utc_options(dsn),
    )


def utc_options(dsn: str) -> str:
    """The connection's ``options`` (from ``dsn``, else PGOPTIONS) with the session
    time zone set to UTC, so that no option an operator gives is lost."""
    given = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
    return f"{given} -c TimeZone=UTC".strip()
