"""Every session is opened in UTC without losing an option the operator gave."""

from __future__ import annotations

import pytest

from app.db.connection import utc_options


def test_a_dsn_without_options_gets_only_the_utc_session() -> None:
    assert utc_options("postgresql://revisit@db.example/revisit") == "-c TimeZone=UTC"


def test_the_options_of_the_dsn_are_kept_before_the_utc_session() -> None:
    dsn = "host=db.example dbname=revisit options='-c statement_timeout=5000'"
    assert utc_options(dsn) == "-c statement_timeout=5000 -c TimeZone=UTC"


def test_pgoptions_is_kept_when_the_dsn_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=64MB")
    assert (
        utc_options("postgresql://revisit@db.example/revisit") == "-c work_mem=64MB -c TimeZone=UTC"
    )


def test_the_dsn_options_win_over_pgoptions_as_libpq_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=64MB")
    dsn = "host=db.example options='-c lock_timeout=100'"
    assert utc_options(dsn) == "-c lock_timeout=100 -c TimeZone=UTC"
