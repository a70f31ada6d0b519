"""conftest.py beside a copy of swh-scheduler's ``test_scheduler.py`` (its
``TestScheduler`` interface suite), run by benchmarks/reference_interface_suite.py
with the reference's interpreter: each test's ``swh_scheduler`` is the
reference's RemoteScheduler on a fresh revisit RPC server and database, which
the benchmark's control endpoint (REVISIT_SUITE_CONTROL) hands out."""

import contextlib
import json
import os
import urllib.request
from datetime import timedelta

import pytest
from swh.scheduler import get_scheduler
from swh.scheduler.conftest import (  # noqa: F401 (fixtures the suite uses)
    listed_origins,
    listed_origins_by_type,
    listed_origins_with_non_enabled,
    stored_lister,
    task_types,
    visit_types,
)
from swh.scheduler.model import TaskType
from swh.scheduler.pytest_plugin import TASK_NAMES


@pytest.fixture
def swh_scheduler():
    control = urllib.request.Request(os.environ["REVISIT_SUITE_CONTROL"], data=b"")
    with urllib.request.urlopen(control, timeout=60) as answer:
        url = json.load(answer)["url"]
    scheduler = get_scheduler("remote", url=url)
    # The reference's fixture creates these test task types; revisit creates only
    # load-<visit type> ones, so a test that needs them fails and says so.
    for name in TASK_NAMES:
        with contextlib.suppress(Exception):
            scheduler.create_task_type(
                TaskType(
                    type=f"swh-test-{name}",
                    description=f"The {name} testing task",
                    backend_name=f"swh.scheduler.tests.tasks.{name}",
                    default_interval=timedelta(days=1),
                    min_interval=timedelta(hours=6),
                    max_interval=timedelta(days=12),
                )
            )
    return scheduler
