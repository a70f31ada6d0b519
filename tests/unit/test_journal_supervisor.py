"""``revisit journal --processes N``: the supervisor of the client processes, and
the one /metrics it serves for them (the real clients: tests/integration/
test_journal_processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry

from actors.supervisor import Supervisor
from monitoring.metrics import JOURNAL_OWNED
from monitoring.multiprocess import MULTIPROC_ENV, OwnedFiles, mark_dead
from tests.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
#: A child that stops cleanly on SIGTERM, once it says it is ready.
CHILD = (
    "import os, signal, sys, time, pathlib\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "pathlib.Path(sys.argv[1], str(os.getpid())).touch()\n"
    "time.sleep(60)\n"
)


def started(tmp_path: Path, copies: int, grace_s: float = 10.0) -> tuple[Supervisor, list[int]]:
    """A supervisor of ``copies`` CHILDs running in a thread, once they are ready;
    its exit code goes to ``supervisor.code``."""
    supervisor = Supervisor(
        [sys.executable, "-c", CHILD, str(tmp_path)], copies, dict(os.environ), grace_s=grace_s
    )
    thread = threading.Thread(target=lambda: setattr(supervisor, "code", supervisor.run()))
    thread.start()
    supervisor.thread = thread  # type: ignore[attr-defined]
    wait_for(lambda: len(list(tmp_path.iterdir())) == copies, 20, "the children to be ready")
    return supervisor, [c.pid for c in supervisor.children]


def finished(supervisor: Supervisor) -> int:
    supervisor.thread.join(20)  # type: ignore[attr-defined]
    return int(supervisor.code)  # type: ignore[attr-defined]


def test_a_supervisor_told_to_stop_stops_every_child_cleanly_and_exits_zero(
    tmp_path: Path,
) -> None:
    supervisor, _ = started(tmp_path, 2)

    supervisor.stop(signal.SIGTERM)

    assert finished(supervisor) == 0
    assert [c.returncode for c in supervisor.children] == [0, 0]


def test_a_child_that_dies_unbidden_stops_the_others_and_the_supervisor_exits_non_zero(
    tmp_path: Path,
) -> None:
    exited: list[int] = []
    supervisor, pids = started(tmp_path, 3)
    supervisor.on_exit = exited.append

    os.kill(pids[1], signal.SIGKILL)

    assert finished(supervisor) == 1
    assert [c.returncode for c in supervisor.children] == [0, -signal.SIGKILL, 0]
    assert sorted(exited) == sorted(pids)


def test_a_child_that_ignores_the_stop_is_killed_after_the_grace(tmp_path: Path) -> None:
    supervisor, pids = started(tmp_path, 1, grace_s=0.5)
    os.kill(pids[0], signal.SIGSTOP)  # deaf to SIGTERM until killed
    began = time.monotonic()

    supervisor.stop(signal.SIGTERM)

    assert finished(supervisor) == 1
    assert supervisor.children[0].returncode == -signal.SIGKILL
    assert time.monotonic() - began < 5


def test_a_bad_number_of_processes_is_refused_before_anything_starts() -> None:
    for bad in ("0", "-1", "two"):
        done = subprocess.run(
            [sys.executable, "-m", "app", "journal", "--processes", bad],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert "--processes" in done.stderr


#: What a client's code below may use.
PREAMBLE = (
    "import os\nfrom monitoring.metrics import *\nfrom monitoring.multiprocess import forget\n"
)


def _client(directory: Path, code: str) -> int:
    """Run ``code`` as a journal client process writing into ``directory``; its pid."""
    done = subprocess.run(
        [sys.executable, "-c", PREAMBLE + code + "\nprint(os.getpid())"],
        env={"PATH": os.environ["PATH"], MULTIPROC_ENV: str(directory)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_one_endpoint_sums_the_clients_and_a_revoked_partitions_lag_is_its_new_owners(
    tmp_path: Path,
) -> None:
    # The first client owned partitions 0 and 1, then lost 0 in a rebalance.
    first = _client(
        tmp_path,
        "JOURNAL_MESSAGES.labels('full', 'git').inc(3)\n"
        "JOURNAL_ASSIGNED_PARTITIONS.set(1)\n"
        "JOURNAL_CONSUMER_LAG.labels('0').set(500)\n"
        "JOURNAL_CONSUMER_LAG.labels('1').set(7)\n"
        "forget(JOURNAL_CONSUMER_LAG, '0')\n",
    )
    # The second owns 0 and 2, and has applied a batch of 0 but none of 2 yet.
    _client(
        tmp_path,
        "JOURNAL_MESSAGES.labels('full', 'git').inc(4)\n"
        "JOURNAL_ASSIGNED_PARTITIONS.set(2)\n"
        "JOURNAL_CONSUMER_LAG.labels('2')\n"
        "JOURNAL_CONSUMER_LAG.labels('0').set(5)\n",
    )
    registry = CollectorRegistry()
    registry.register(OwnedFiles(tmp_path, JOURNAL_OWNED))

    def lag(partition: str) -> float | None:
        return registry.get_sample_value("revisit_journal_consumer_lag", {"partition": partition})

    total = {"status": "full", "visit_type": "git"}
    assert registry.get_sample_value("revisit_journal_messages_total", total) == 7
    assert registry.get_sample_value("revisit_journal_assigned_partitions") == 3
    assert (lag("0"), lag("1"), lag("2")) == (5, 7, None)
    assert registry.get_sample_value("revisit_journal_batch_seconds_count") == 0
    served = {f.name for f in registry.collect()}
    assert not any(name.startswith(("revisit_scheduler", "revisit_worker")) for name in served)

    mark_dead(first, tmp_path)  # the first client exited

    assert registry.get_sample_value("revisit_journal_messages_total", total) == 7
    assert registry.get_sample_value("revisit_journal_assigned_partitions") == 2
    assert (lag("0"), lag("1")) == (5, None)


@pytest.mark.parametrize("mode", ["single", "multiprocess"])
def test_a_revoked_partitions_lag_is_no_longer_served(mode: str, tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    if mode == "multiprocess":
        env[MULTIPROC_ENV] = str(tmp_path)
    code = (
        "from monitoring.metrics import JOURNAL_CONSUMER_LAG as LAG, JOURNAL_OWNED\n"
        "from monitoring.multiprocess import OwnedFiles, forget, in_multiprocess_mode\n"
        "from prometheus_client import CollectorRegistry\n"
        "LAG.labels('3').set(9); forget(LAG, '3')\n"
        "registry = CollectorRegistry()\n"
        "registry.register(OwnedFiles(sys.argv[1], JOURNAL_OWNED) if in_multiprocess_mode()"
        " else LAG)\n"
        "print(registry.get_sample_value('revisit_journal_consumer_lag', {'partition': '3'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code, str(tmp_path)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "None"


def test_a_child_whose_supervisor_dies_stops_by_itself(tmp_path: Path) -> None:
    orphan = (
        "import signal, sys, threading\n"
        "from actors.supervisor import watch_parent\n"
        "stop = threading.Event()\n"
        "signal.signal(signal.SIGTERM, lambda *_: stop.set())\n"
        "watch_parent()\n"
        "print('watching', flush=True)\n"
        "sys.exit(0 if stop.wait(30) else 1)\n"
    )
    # The supervisor starts the child, waits until it watches, then dies.
    supervisor = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"
        "print(child.pid, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", supervisor, orphan],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    child = psutil.Process(int(done.stdout))

    wait_for(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 10, "it")
