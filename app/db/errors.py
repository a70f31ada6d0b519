"""Telling an unavailable PostgreSQL from a value it refuses.

An unavailable server (connection lost, shutting down, too many clients) is
waited for and the same work retried; a value it refuses (too long for an
index, out of range, a NUL byte, a broken constraint) will be refused again
however often it is retried, so it is bad input: the message carrying it is
dead-lettered and the rest goes on (DESIGN invariant 5). psycopg files some
refusals, like ``ProgramLimitExceeded``, under ``OperationalError``, so the
SQLSTATE class decides, not the Python class alone.
"""

from __future__ import annotations

import psycopg

#: SQLSTATE classes of refused values: data exception, integrity constraint
#: violation, program limit exceeded (e.g. an index row too large).
REFUSED_VALUE_CLASSES = frozenset({"22", "23", "54"})


def is_refused_value(exc: BaseException) -> bool:
    """True if PostgreSQL (or psycopg, before sending) refused a value in the statement."""
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        return True
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(exc, psycopg.Error) and (sqlstate or "")[:2] in REFUSED_VALUE_CLASSES


def is_conflict(exc: BaseException) -> bool:
    """True if PostgreSQL rolled the transaction back for another writer (SQLSTATE
    class 40: a deadlock, a serialization failure): the same work, run again,
    goes through. psycopg's ``TransactionRollback`` is class 40's bare code
    only; ``DeadlockDetected`` and ``SerializationFailure`` are not under it."""
    return isinstance(exc, psycopg.Error) and (getattr(exc, "sqlstate", None) or "")[:2] == "40"


def is_unavailable(exc: BaseException) -> bool:
    """True if the server could not do the work now but may later (wait and retry)."""
    return isinstance(exc, psycopg.OperationalError) and not is_refused_value(exc)


def refusal(exc: BaseException) -> str | None:
    """What PostgreSQL said when it refused a value (None: not a refused value)."""
    if not is_refused_value(exc):
        return None
    diag = getattr(exc, "diag", None)
    return ((diag.message_primary if diag else None) or str(exc)).strip()
