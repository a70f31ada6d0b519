"""The throwaway PostgreSQL of the demo and the tests runs with production-like
settings (app.devtools.embedded.server_settings), not initdb's defaults."""

import os

import psycopg
import pytest

from app.devtools.embedded import server_settings

GIB = 2**30


@pytest.mark.parametrize(
    ("memory", "buffers"),
    [(2 * GIB, "1024MB"), (24 * GIB, "3072MB"), (256 * GIB, "4096MB")],
)
def test_shared_buffers_are_an_eighth_of_the_memory_between_1_and_4_gib(
    memory: int, buffers: str
) -> None:
    assert server_settings(memory) == {"shared_buffers": buffers, "max_wal_size": "4GB"}


def test_the_embedded_server_runs_with_those_settings_after_its_restart(
    service_env: dict[str, str],
) -> None:
    if os.environ.get("REVISIT_TEST_DATABASE_URL"):
        pytest.skip("the tests were given a PostgreSQL: its settings are its operator's")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with psycopg.connect(service_env["REVISIT_DATABASE_URL"]) as conn:
        for name, value in server_settings(memory).items():
            row = conn.execute(
                "select pg_size_bytes(current_setting(%s)) = pg_size_bytes(%s)", (name, value)
            ).fetchone()
            assert row == (True,), f"{name} is not {value}"
