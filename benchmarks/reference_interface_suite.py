"""swh-scheduler's own interface test suite (``TestScheduler``) through revisit's
RPC server: which of the reference's tests pass, fail, or hit an endpoint revisit
does not serve (issue 32).

    python -m benchmarks.reference_interface_suite [--reference PYTHON] [-k EXPR]

The suite runs with pytest in the reference's virtualenv (swh-scheduler 3.6.0
with its ``pytest`` extra, installed there on first use: tests/reference/venv.py),
from a copy of its ``test_scheduler.py`` beside
``tests/reference/interface_suite_conftest.py``: each test's ``swh_scheduler``
is the reference's RemoteScheduler on a revisit RPC server of its own (in this
process) over a fresh database copied from a migrated template and its own
Redis namespace, on throwaway services (app.devtools.embedded) unless
REVISIT_* addresses are given. Prints passed / failed / unserved / differs by
design and, for each test that did not pass, the first line of why:

- unserved: the test reached an endpoint revisit answers 501, or a task revisit
  refuses by design (a recurring or positional-argument task: README, "The
  task API");
- differs by design: a served endpoint answered as revisit means to, where the
  reference answers otherwise (``DIFFERS_BY_DESIGN``, each in the README's
  compatibility notes);
- failed: anything else, a bug against the reference.

``--register-visit-types`` registers the suite's visit types first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
from pydantic import SecretStr

from app.db.migrate import migrate
from app.rpc.server import make_server, serve_until
from app.settings import Settings
from benchmarks.common import bench_settings
from tests.reference.venv import reference_python

ROOT = Path(__file__).resolve().parent.parent
CONFTEST = ROOT / "tests" / "reference" / "interface_suite_conftest.py"
SUITE = "swh.scheduler.tests.test_scheduler"
TEMPLATE = "revisit_suite_template"
#: What revisit refuses by design (README, "The task API"): a test that needs it
#: is counted unserved, not failed.
REFUSALS = (
    "revisit keeps no recurring load tasks",
    "revisit's loaders take kwargs only",
    "kwargs.url: required",
    "revisit creates only load-<visit type> task types",
)


#: Tests (by name, parameters stripped) that fail where revisit differs from the
#: reference on purpose (README, "The task API"), and why.
DIFFERS_BY_DESIGN = {
    "test_grab_next_visits_cooldowns": "grab_next applies revisit's cooldowns, not the call's",
    "test_grab_next_visits_never_visited_oldest_update_first": (
        "an origin's last_update only moves forward (an older one re-recorded keeps its place)"
    ),
    "test_grab_next_visits_already_visited_order_by_lag": (
        "an origin's last_update only moves forward (an older one re-recorded keeps its place)"
    ),
    "test_grab_next_visit_duplicates": "grab_next returns one listing per origin, not per lister",
}


def with_dbname(dsn: str, name: str) -> str:
    """``dsn`` naming database ``name``."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


class Servers:
    """Hands out a fresh revisit RPC server per test, stopping the previous one."""

    def __init__(self, settings: Settings, visit_types: list[str]) -> None:
        self.settings, self.admin = settings, settings.database_dsn()
        self.current: tuple[threading.Event, threading.Thread, str] | None = None
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"drop database if exists {TEMPLATE} with (force)")
            conn.execute(f"create database {TEMPLATE}")
        template = with_dbname(self.admin, TEMPLATE)
        migrate(template)
        with psycopg.connect(template, autocommit=True) as conn:
            for name in visit_types:
                conn.execute(
                    "insert into visit_types (name) values (%s) on conflict do nothing", (name,)
                )

    def fresh(self) -> str:
        """A new server on a new database; its URL."""
        self.stop()
        name = f"suite_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"create database {name} template {TEMPLATE}")
        settings = self.settings.model_copy(
            update={
                "database_url": SecretStr(with_dbname(self.admin, name)),
                "redis_namespace": name,
                "rpc_port": 0,
            }
        )
        server = make_server(settings)
        stop = threading.Event()
        thread = threading.Thread(target=serve_until, args=(server, stop), daemon=True)
        thread.start()
        self.current = stop, thread, name
        return f"http://127.0.0.1:{server.server_address[1]}/"

    def stop(self) -> None:
        """Stop the current server and drop its database."""
        if self.current is None:
            return
        stop, thread, name = self.current
        stop.set()
        thread.join(10)
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"drop database if exists {name} with (force)")
        self.current = None


@contextmanager
def control(servers: Servers) -> Iterator[str]:
    """A loopback endpoint the suite's fixture POSTs to for a fresh server."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.dumps({"url": servers.fresh()}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/fresh"
    finally:
        httpd.shutdown()
        httpd.server_close()
        servers.stop()


def ensure_pytest(python: Path) -> None:
    """The reference's ``pytest`` extra in its virtualenv (installed on first use)."""
    probe = subprocess.run([str(python), "-c", "import pytest_postgresql"], check=False)
    if probe.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "swh-scheduler[pytest]==3.6.0"], check=True
        )


def suite_copy(python: Path, folder: Path) -> Path:
    """The reference's test_scheduler.py, importable outside its package, with our conftest."""
    source = subprocess.run(
        [str(python), "-c", f"import {SUITE} as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    text = (
        Path(source)
        .read_text()
        .replace("from .common import", "from swh.scheduler.tests.common import")
    )
    (folder / "test_scheduler.py").write_text(text)
    (folder / "conftest.py").write_text(CONFTEST.read_text())
    return folder / "test_scheduler.py"


def suite_visit_types(python: Path) -> list[str]:
    """The visit types of the suite's listed origins (its ``visit_types`` fixture)."""
    names = subprocess.run(
        [
            str(python),
            "-c",
            "from swh.scheduler.tests.common import TASK_TYPES, ONE_SHOT_TASK_TYPES as O;"
            "print(' '.join([*TASK_TYPES, *O]))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return names.stdout.split()


def outcomes(junit: Path) -> list[tuple[str, str, str]]:
    """(test, outcome, why) of each test case of a JUnit XML report."""
    found = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if problem is None:
            found.append((name, "passed", ""))
            continue
        text = f"{problem.get('message') or ''}\n{problem.text or ''}"
        why = next((line.strip() for line in text.splitlines() if line.strip()), "")
        served = re.search(r"([a-z_]+/[a-z_]+): not served by revisit", text)
        refused = next((r for r in REFUSALS if r in text), None)
        if served:
            found.append((name, "unserved", f"{served[1]} answers 501"))
        elif refused:
            found.append((name, "unserved", f"refused: {refused}"))
        elif problem.tag == "skipped":
            found.append((name, "skipped", why[:200]))
        elif name.split("[")[0] in DIFFERS_BY_DESIGN:
            found.append((name, "differs", DIFFERS_BY_DESIGN[name.split("[")[0]]))
        else:
            found.append((name, "failed", why[:200]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference",
        type=Path,
        help="the reference's interpreter (default: tests/reference/venv.py's, made on first use)",
    )
    parser.add_argument("-k", default="", help="pytest -k expression (a subset of the suite)")
    parser.add_argument(
        "--register-visit-types",
        action="store_true",
        help="register the suite's visit types first (test-git, svn-export...), to see how "
        "the rest fares where revisit does not create them on first use",
    )
    args = parser.parse_args()
    args.reference = args.reference or reference_python()
    ensure_pytest(args.reference)
    with bench_settings() as settings, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        suite = suite_copy(args.reference, folder)
        servers = Servers(
            settings, suite_visit_types(args.reference) if args.register_visit_types else []
        )
        with control(servers) as url:
            command = [
                str(args.reference),
                "-m",
                "pytest",
                str(suite),
                "-q",
                "-p",
                "no:cacheprovider",
            ]
            command += [f"--junitxml={folder / 'junit.xml'}", "--rootdir", str(folder)]
            command += ["-k", args.k] if args.k else []
            env = {**os.environ, "REVISIT_SUITE_CONTROL": url}
            subprocess.run(command, cwd=folder, env=env, capture_output=True, check=False)
        found = outcomes(folder / "junit.xml")
    counts = {
        k: sum(1 for _, o, _ in found if o == k)
        for k in ("passed", "failed", "unserved", "differs", "skipped")
    }
    print(
        f"TestScheduler through revisit: {len(found)} tests, "
        + ", ".join(f"{v} {k}".replace("differs", "differ by design") for k, v in counts.items())
    )
    for name, outcome, why in found:
        if outcome != "passed":
            print(f"  {outcome:8} {name}: {why}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
