"""pytest plugin: swh-lister's own test suite against a scheduler's RPC server.

Loaded by benchmarks/listers_suite.py into a virtualenv holding
swh-lister and the reference scheduler (never a dependency of revisit), after
``swh.scheduler.pytest_plugin``, so these fixtures replace the reference's:

- ``swh_scheduler``: the reference's ``RemoteScheduler`` on
  ``LISTERS_SUITE_URL``, after ``LISTERS_SUITE_RESET`` (SQL) has emptied the
  server's tables at ``LISTERS_SUITE_DSN``: each test starts from an empty
  database, as with the reference's own fixture (which also creates test task
  types; no lister test reads them, and revisit keeps none). Its HTTP session
  sends for real: the tests mock every other request (requests_mock patches
  ``requests.Session.send``), and the scheduler is on loopback;
- ``swh_scheduler_config``: that database's DSN, for the few tests that build
  a lister from a configuration file (they only instantiate it);
- every sleep lasts at most 50 ms: a lister's HTTP retries wait 1, 10, 100
  then 1,000 s (swh.core.retry), which some tests (maven's HTTP errors) do not
  mock; tests that check the waits mock ``time.sleep`` over this.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg
import pytest
import requests
from swh.scheduler import get_scheduler

os.environ["LC_ALL"] = "C.UTF-8"  # as swh-lister's own conftest


_SLEEP = time.sleep


@pytest.fixture(autouse=True)
def _short_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: _SLEEP(min(seconds, 0.05)))


@pytest.fixture
def mock_sleep(mocker: Any) -> Any:
    return mocker.patch("time.sleep")


#: requests' own send, before any test's requests_mock replaces it.
_SEND = requests.Session.send


class _Unmocked(requests.Session):
    send = _SEND


@pytest.fixture
def swh_scheduler_config() -> dict[str, Any]:
    with psycopg.connect(os.environ["LISTERS_SUITE_DSN"], autocommit=True) as conn:
        conn.execute(os.environ["LISTERS_SUITE_RESET"])
    return {"db": os.environ["LISTERS_SUITE_DSN"]}


@pytest.fixture
def swh_scheduler(swh_scheduler_config: dict[str, Any]) -> Any:
    scheduler = get_scheduler("remote", url=os.environ["LISTERS_SUITE_URL"])
    scheduler.session.__class__ = _Unmocked  # keeps its adapters and headers
    return scheduler
