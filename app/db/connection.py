"""Opening PostgreSQL connections."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from app.settings import Settings

DictConnection = psycopg.Connection[dict[str, Any]]


def connect(settings: Settings, *, autocommit: bool = True) -> DictConnection:
    """A new connection whose rows come back as dicts.

    Autocommit by default: every write path opens an explicit transaction, so
    no statement leaves a transaction (and its row locks) open by accident.
    """
    return psycopg.connect(
        settings.database_dsn(),
        row_factory=dict_row,
        autocommit=autocommit,
        # Statements here run a few times each with large arrays: preparing them
        # costs more client time (psycopg keys each by its text) than it saves.
        prepare_threshold=None,
    )
