"""Backoff arithmetic and the classification of PostgreSQL errors."""

from __future__ import annotations

import psycopg
import pytest

from app.db.errors import is_refused_value, is_unavailable
from app.domain.backoff import Backoff


def test_backoff_doubles_up_to_its_maximum_and_starts_over_after_a_reset() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next_delay_s() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next_delay_s() == 0.5


@pytest.mark.parametrize(
    ("error", "refused", "unavailable"),
    [
        (psycopg.errors.ProgramLimitExceeded("index row size exceeds maximum"), True, False),
        (psycopg.errors.StringDataRightTruncation("value too long"), True, False),
        (psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"), True, False),
        (psycopg.errors.UniqueViolation("duplicate key"), True, False),
        (psycopg.OperationalError("the connection is closed"), False, True),
        (psycopg.errors.AdminShutdown("terminating connection"), False, True),
        (psycopg.errors.TooManyConnections("too many clients"), False, True),
    ],
)
def test_a_refused_value_is_told_apart_from_an_unavailable_server(
    error: psycopg.Error, refused: bool, unavailable: bool
) -> None:
    assert is_refused_value(error) is refused
    assert is_unavailable(error) is unavailable
