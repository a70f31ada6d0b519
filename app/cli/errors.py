"""One line, naming the setting to fix, when a service cannot be reached.

A command that cannot reach PostgreSQL, Redis or the broker says which and
where (host and port only: a password in a URL is never echoed), instead of
a traceback.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
import redis

from app.settings import get_settings


def _postgres_address() -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(get_settings().database_dsn())
    except psycopg.ProgrammingError:
        return "(unparsable)"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def _redis_address() -> str:
    parts = urlsplit(get_settings().redis_dsn())
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def unreachable(exc: BaseException) -> str | None:
    """The one-line message for ``exc`` if it says a service is unreachable."""
    if isinstance(exc, psycopg.OperationalError):
        return (
            f"cannot reach PostgreSQL at {_postgres_address()} "
            f"(set REVISIT_DATABASE_URL): {_first_line(exc)}"
        )
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return (
            f"cannot reach Redis at {_redis_address()} (set REVISIT_REDIS_URL): {_first_line(exc)}"
        )
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return f"the database has no revisit schema: run `revisit db migrate` ({_first_line(exc)})"
    return None
