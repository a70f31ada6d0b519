"""Test services: real PostgreSQL, Redis and a Kafka-protocol broker.

Addresses come from REVISIT_TEST_DATABASE_URL / REVISIT_TEST_REDIS_URL /
REVISIT_TEST_KAFKA_BROKERS when set; otherwise the suite starts throwaway
servers (app.devtools.embedded). Locally a service that cannot be had skips the tests
that need it; under CI=true it fails them.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from hypothesis import settings as hypothesis_settings

from app.db.connection import DictConnection, connect
from app.db.migrate import migrate
from app.devtools import embedded
from app.loaders import archive
from app.loaders.outbound import service_addresses
from app.loaders.zygote import ForkServer
from app.rpc.server import serving_on_a_free_port
from app.services.context import Context
from app.settings import Settings, get_settings
from tests.processes import with_constants

IN_CI = os.environ.get("CI", "").lower() == "true"
#: Under CI the property tests draw the same examples at every run, so a red CI
#: run is red again when rerun and a green one cannot turn red by chance;
#: local runs keep drawing new examples (and replay the failures they saved).
hypothesis_settings.register_profile("ci", derandomize=True)
if IN_CI:
    hypothesis_settings.load_profile("ci")
#: The internal hosts the tests visit: forges on local disk (file://) and
#: servers on loopback. Set for the whole session, so the URL rules checked in
#: this process (listings built by a test) allow them too; a test of the rules
#: themselves sets its own allowance.
TEST_INTERNAL_HOSTS = '["localhost", "127.0.0.1"]'
os.environ.setdefault("REVISIT_ALLOWED_INTERNAL_HOSTS", TEST_INTERNAL_HOSTS)


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``every_mirror`` run with the mirror on one Redis and again on
    a Redis Cluster (the broker then on its own Redis); ``every_mirror(sharded=True)``
    also on the cluster with git's mirror split into 3 shards."""
    marker = metafunc.definition.get_closest_marker("every_mirror")
    if marker and "mirror_backend" in metafunc.fixturenames:
        backends = ["redis", "cluster"]
        if marker.kwargs.get("sharded"):
            backends.append("sharded_cluster")
        metafunc.parametrize("mirror_backend", backends, indirect=True)


@pytest.fixture
def mirror_backend(request: pytest.FixtureRequest) -> str:
    """Where the mirror lives: 'redis' (the default), 'cluster' or 'sharded_cluster'."""
    return str(getattr(request, "param", "redis"))


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-master Redis Cluster started for the session (or REVISIT_TEST_REDIS_CLUSTER_URL)."""
    given = os.environ.get("REVISIT_TEST_REDIS_CLUSTER_URL")
    if given:
        yield given
        return
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(embedded.redis_cluster(tmp_path_factory.mktemp("cluster")))
        except Exception as exc:
            _unavailable("Redis Cluster", exc)
        yield url


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


@contextlib.contextmanager
def fresh_database(admin: str) -> Iterator[str]:
    """A database copied from the migrated template (``template_dsn``), dropped after."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"create database {name} template revisit_template")  # type: ignore[arg-type]
    yield _with_dbname(admin, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"drop database if exists {name} with (force)")  # type: ignore[arg-type]


@pytest.fixture
def database_url(service_env: dict[str, str], template_dsn: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    with fresh_database(service_env["REVISIT_DATABASE_URL"]) as url:
        yield url


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
    service_env: dict[str, str],
    database_url: str,
    redis_url: str,
    mirror_backend: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> Settings:
    """Settings for one test: its own database and Kafka topics; also exported as
    REVISIT_* so subprocesses started by the test see the same. With the
    'cluster' mirror backend, the mirror is on the Redis Cluster (emptied) and
    the broker on the test Redis."""
    suffix = uuid.uuid4().hex[:8]
    values: dict[str, Any] = {
        "REVISIT_DATABASE_URL": database_url,
        "REVISIT_REDIS_URL": redis_url,
        "REVISIT_KAFKA_BROKERS": service_env["REVISIT_KAFKA_BROKERS"],
        "REVISIT_JOURNAL_TOPIC": f"journal-{suffix}",
        "REVISIT_DEAD_LETTER_TOPIC": f"dead-letter-{suffix}",
        "REVISIT_JOURNAL_GROUP_ID": f"group-{suffix}",
        "REVISIT_WORKER_VISIT_TYPES_ALLOW": '["git"]',
        # The test forges are git repositories on local disk (file:// URLs),
        # and some servers a test visits listen on loopback.
        "REVISIT_ALLOWED_INTERNAL_HOSTS": TEST_INTERNAL_HOSTS,
    }
    if mirror_backend in ("cluster", "sharded_cluster"):
        cluster_url = request.getfixturevalue("redis_cluster_url")
        redis.RedisCluster.from_url(cluster_url).flushdb()
        values["REVISIT_REDIS_URL"] = cluster_url
        values["REVISIT_REDIS_CLUSTER"] = "true"
        values["REVISIT_BROKER_REDIS_URL"] = redis_url
    if mirror_backend == "sharded_cluster":
        values["REVISIT_MIRROR_SHARDS"] = '{"git": 3}'
    # Quicker Kafka rebalances and batches, here and in the processes a test starts.
    constants = {
        "app.kafka.client.SESSION_TIMEOUT_MS": 1000,
        "actors.journal_consumer.BATCH_TIMEOUT_S": 0.2,
    }
    for name, constant in constants.items():
        monkeypatch.setattr(name, constant)
    values |= with_constants(constants)
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


@pytest.fixture
def internal_hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[list[str]], None]]:
    """Set REVISIT_ALLOWED_INTERNAL_HOSTS for this test: here (the URL rules read
    it through the process's settings) and in the processes it starts."""

    def allow(hosts: list[str]) -> None:
        monkeypatch.setenv("REVISIT_ALLOWED_INTERNAL_HOSTS", json.dumps(hosts))
        get_settings.cache_clear()

    yield allow
    get_settings.cache_clear()


@pytest.fixture
def rpc_url(settings: Settings) -> Iterator[str]:
    """revisit's RPC server on a free loopback port, for one test."""
    with serving_on_a_free_port(settings) as url:
        yield url


@pytest.fixture
def fork_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    """A fork server of the test's own, the archive's loaders writing to a memory storage."""
    try:
        import swh.loader.git  # noqa: F401
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"the archive's packages are not installed: {exc}")
        pytest.skip(f"the archive's packages are not installed: {exc}")
    config = tmp_path / "loader.yml"
    config.write_text(json.dumps({"storage": {"cls": "memory"}}))
    monkeypatch.setenv("SWH_CONFIG_FILENAME", str(config))
    server = ForkServer(archive.FORK_SERVER_ARGV)
    monkeypatch.setattr(archive, "FORK_SERVER", server)
    yield server
    server.close()


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """hold_connections_to_rules patches socket.socket and subprocess.Popen, and the
    services' addresses are kept: all restored after the test."""
    monkeypatch.setattr(socket.socket, "connect", socket.socket.connect)
    monkeypatch.setattr(socket.socket, "connect_ex", socket.socket.connect_ex)
    monkeypatch.setattr(subprocess.Popen, "__init__", subprocess.Popen.__init__)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    service_addresses.cache_clear()
    yield
    service_addresses.cache_clear()
