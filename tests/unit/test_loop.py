"""The loop runner of the long-running processes (actors.loop), without servers."""

from __future__ import annotations

import logging
import threading
from datetime import datetime

import psycopg
import pytest
import redis

from actors.loop import run_every

LOG = logging.getLogger("revisit.test")


class Beats(threading.Event):
    """A stop event that records each wait and sets itself after ``steps`` of them."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(round(timeout or 0.0, 1))
        if len(self.waits) >= self.steps:
            self.set()
        return self.is_set()


def test_a_failing_step_is_retried_after_doubling_waits_then_at_the_usual_pace() -> None:
    outcomes = iter([False, False, False, True, False, True])
    stop = Beats(6)

    def step(now: datetime) -> None:
        if not next(outcomes):
            raise redis.ConnectionError("Connection refused")

    run_every(step, 10.0, stop, LOG)
    assert stop.waits[:3] == [10.0, 20.0, 30.0]  # doubling, at most 30 s
    assert stop.waits[4] == 10.0  # after a success, the backoff starts over
    assert 9.0 < stop.waits[3] <= 10.0  # the usual pace, less the step's own time


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (psycopg.OperationalError("connection failed: the server is restarting"), "PostgreSQL"),
        (redis.ConnectionError("Connection refused"), "Redis"),
    ],
)
def test_a_server_away_is_one_line_without_a_traceback_naming_it(
    error: Exception, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    stop = Beats(1)

    def step(now: datetime) -> None:
        raise error

    run_every(step, 1.0, stop, LOG, "metrics refresh")
    [record] = [r for r in caplog.records if r.name == LOG.name]
    assert f"metrics refresh failed, {said} unavailable ({error})" in record.message
    assert record.exc_info is None


def test_any_other_failure_is_logged_with_its_traceback_and_never_ends_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = Beats(3)

    def step(now: datetime) -> None:
        raise ValueError("a bug")

    run_every(step, 1.0, stop, LOG)
    records = [r for r in caplog.records if r.name == LOG.name]
    assert len(records) == 3
    assert all(r.exc_info is not None for r in records)


def test_a_step_run_back_to_back_is_retried_after_half_a_second_then_doubling() -> None:
    stop = Beats(3)

    def step(now: datetime) -> None:
        raise redis.ConnectionError("Connection refused")

    run_every(step, 0.0, stop, LOG)
    assert stop.waits == [0.5, 1.0, 2.0]


def test_the_caller_names_the_server_its_failures_blame(caplog: pytest.LogCaptureFixture) -> None:
    stop = Beats(1)

    def step(now: datetime) -> None:
        raise RuntimeError("broker gone")

    run_every(step, 1.0, stop, LOG, "batch", server_of=lambda exc: "kafka")
    [record] = [r for r in caplog.records if r.name == LOG.name]
    assert "batch failed, kafka unavailable (broker gone)" in record.message
    assert record.exc_info is None
