"""Credentials in service addresses are never printed: not by the settings, the
CLI's errors, nor the logs of a process that cannot reach its services."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest

from actors.scheduler import SchedulerLoop
from app.settings import Settings

DB_SECRET = "pg-s3cret-Xq7"
REDIS_SECRET = "redis-s3cret-Zk2"
ENV = {
    # Nothing listens on port 1: every connection fails, and its error is printed.
    "REVISIT_DATABASE_URL": f"postgresql://revisit:{DB_SECRET}@127.0.0.1:1/revisit",
    "REVISIT_REDIS_URL": f"redis://:{REDIS_SECRET}@127.0.0.1:1/0",
    "REVISIT_KAFKA_BROKERS": "127.0.0.1:1",
}


def assert_no_secret(text: str) -> None:
    assert DB_SECRET not in text
    assert REDIS_SECRET not in text


def test_settings_never_show_the_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert_no_secret(repr(settings) + str(settings) + settings.model_dump_json())
    assert DB_SECRET in settings.database_dsn()  # the driver still gets them


@pytest.mark.parametrize("command", [["mirror", "check"], ["request", "list"]])
def test_cli_errors_never_show_the_credentials(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    done = subprocess.run(
        [sys.executable, "-m", "app", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert_no_secret(done.stdout + done.stderr)


def test_scheduler_logs_of_unreachable_services_never_show_the_credentials(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    stop = threading.Event()
    monkeypatch.setattr("actors.scheduler.POLL_INTERVAL_S", 0.05)
    loop = SchedulerLoop(Settings())
    threading.Timer(1.0, stop.set).start()
    with caplog.at_level(logging.DEBUG):
        loop.run(stop)
    assert "scheduler step failed" in caplog.text
    assert_no_secret(caplog.text)
