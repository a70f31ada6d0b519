"""Shared set-up of the benchmarks: services (embedded unless given) and a fresh schema."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
from pydantic import SecretStr

from app.db.migrate import migrate
from app.devtools import embedded
from app.settings import Settings

BENCHMARKS = Path(__file__).resolve().parent


@contextlib.contextmanager
def bench_settings(**overrides: object) -> Iterator[Settings]:
    """Settings on throwaway services (or REVISIT_* addresses), with an empty schema."""
    with embedded.services(
        os.environ.get("REVISIT_DATABASE_URL"),
        os.environ.get("REVISIT_REDIS_URL"),
        os.environ.get("REVISIT_KAFKA_BROKERS"),
    ) as env:
        settings = Settings(
            database_url=SecretStr(env["REVISIT_DATABASE_URL"]),
            redis_url=SecretStr(env["REVISIT_REDIS_URL"]),
            kafka_brokers=env["REVISIT_KAFKA_BROKERS"],
            **overrides,  # type: ignore[arg-type]
        )
        with psycopg.connect(settings.database_dsn(), autocommit=True) as conn:
            conn.execute("drop schema public cascade")
            conn.execute("create schema public")
        migrate(settings.database_dsn())
        yield settings


def listing_lines(count: int, with_last_update: float = 0.5) -> Iterator[str]:
    """JSON lines of a synthetic forge listing: ``count`` git origins."""
    every = round(1 / with_last_update) if with_last_update else 0
    for i in range(count):
        update = ""
        if every and i % every == 0:
            update = f', "last_update": "2026-{1 + i % 12:02d}-{1 + i % 28:02d}T12:00:00Z"'
        yield (
            f'{{"url": "https://forge.example/group-{i // 1000}/project-{i}.git",'
            f' "visit_type": "git"{update}}}'
        )


@contextlib.contextmanager
def reference_rpc(python: Path, settings: Settings) -> Iterator[tuple[str, str]]:
    """The reference's own RPC server and backend (reference_rpc_server.py, run by
    ``python``) on a fresh database of the same PostgreSQL: its URL and DSN."""
    server = subprocess.Popen(
        [
            str(python),
            str(BENCHMARKS / "reference_rpc_server.py"),
            "--database-url",
            settings.database_dsn(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=BENCHMARKS,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        yield url, server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait(30)
