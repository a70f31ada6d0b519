"""Test services: real PostgreSQL, Redis and a Kafka-protocol broker.

Addresses come from REVISIT_TEST_DATABASE_URL / REVISIT_TEST_REDIS_URL /
REVISIT_TEST_KAFKA_BROKERS when set; otherwise the suite starts throwaway
servers (app.devtools.embedded). Locally a service that cannot be had skips the tests
that need it; under CI=true it fails them.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis

from app.context import Context
from app.db.connection import DictConnection, connect
from app.db.migrate import migrate
from app.devtools import embedded
from app.settings import Settings

IN_CI = os.environ.get("CI", "").lower() == "true"


def _unavailable(what: str, exc: BaseException) -> None:
    message = f"{what} unavailable: {exc}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def service_env() -> Iterator[dict[str, str]]:
    """REVISIT_* addresses of the three services, started if not given."""
    with contextlib.ExitStack() as stack:
        try:
            env = stack.enter_context(
                embedded.services(
                    os.environ.get("REVISIT_TEST_DATABASE_URL"),
                    os.environ.get("REVISIT_TEST_REDIS_URL"),
                    os.environ.get("REVISIT_TEST_KAFKA_BROKERS"),
                )
            )
        except Exception as exc:
            _unavailable("test services", exc)
        yield env


@pytest.fixture(scope="session")
def template_dsn(service_env: dict[str, str]) -> str:
    """A migrated template database that each test's database is copied from."""
    dsn = service_env["REVISIT_DATABASE_URL"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop database if exists revisit_template")
        conn.execute("create database revisit_template")
    template = _with_dbname(dsn, "revisit_template")
    migrate(template)
    return template


def _with_dbname(dsn: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


@pytest.fixture
def database_url(service_env: dict[str, str], template_dsn: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = service_env["REVISIT_DATABASE_URL"]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"create database {name} template revisit_template")  # type: ignore[arg-type]
    yield _with_dbname(admin, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"drop database if exists {name} with (force)")  # type: ignore[arg-type]


@pytest.fixture
def redis_url(service_env: dict[str, str]) -> Iterator[str]:
    """The test Redis, emptied before each test."""
    url = service_env["REVISIT_REDIS_URL"]
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture
def settings(
    service_env: dict[str, str], database_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """Settings for one test: its own database and Kafka topics; also exported as
    REVISIT_* so subprocesses started by the test see the same."""
    suffix = uuid.uuid4().hex[:8]
    values: dict[str, Any] = {
        "REVISIT_DATABASE_URL": database_url,
        "REVISIT_REDIS_URL": redis_url,
        "REVISIT_KAFKA_BROKERS": service_env["REVISIT_KAFKA_BROKERS"],
        "REVISIT_JOURNAL_TOPIC": f"journal-{suffix}",
        "REVISIT_DEAD_LETTER_TOPIC": f"dead-letter-{suffix}",
        "REVISIT_JOURNAL_GROUP_ID": f"group-{suffix}",
        "REVISIT_KAFKA_SESSION_TIMEOUT_MS": "1000",
        "REVISIT_JOURNAL_BATCH_TIMEOUT_S": "0.2",
        "REVISIT_VISIT_TYPES": '["git"]',
        # The test forges are git repositories on local disk (file:// URLs).
        "REVISIT_GIT_ALLOWED_SCHEMES": '["file"]',
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return Settings()


@pytest.fixture
def ctx(settings: Settings) -> Context:
    """Process handles for the test's settings."""
    return Context.from_settings(settings)


@pytest.fixture
def conn(settings: Settings) -> Iterator[DictConnection]:
    """A connection to the test's database."""
    with connect(settings) as connection:
        yield connection
