"""swh-lister's own test suite through the reference's RemoteScheduler: against
revisit's RPC server, then against the reference's own RPC server (issue 32).

    python -m benchmarks.listers_suite [--only EXPR] [--listers-python PY]

The listers' virtualenv (``--listers-python``, default
``.revisit/swh-listers``, created on first use: swh-lister 7.4.0 with its
test extras and the reference scheduler 3.6.0; never revisit's) runs
``pytest --pyargs swh.lister`` twice, on throwaway services
(app.devtools.embedded), its ``swh_scheduler`` fixture replaced by the
reference's ``RemoteScheduler`` (benchmarks/reference_listers_plugin.py) on

- revisit: ``revisit rpc`` in this process, on a migrated database with no
  visit type beyond git, hg and svn (each test empties the tables and drops
  the visit types the previous one created);
- reference: its own RPC server and PostgreSQL backend
  (benchmarks/reference_rpc_server.py, each test on emptied tables).

The listers' HTTP traffic is mocked by their tests (requests_mock); the
scheduler's goes to loopback; launchpad's tests, which reach the Internet,
are left out. Prints passed / failed / errors / skipped of
each run, then the tests that pass against the reference and not against
revisit, with the first line of why.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from app.rpc.server import serving_on_a_free_port
from benchmarks.common import bench_settings, reference_rpc

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["swh.lister[testing]==7.4.0", "swh-scheduler[testing]==3.6.0"]
VENV = ROOT / ".revisit" / "swh-listers"
DEFAULT_TYPES = "('git', 'hg', 'svn')"
REVISIT_RESET = (
    "truncate listers, listed_origins, lister_runs, lister_schedules, origin_visit_stats,"
    " scheduler_metrics, visit_requests, visit_scheduler_queue_position cascade;"
    f" delete from scheduling_policies where visit_type not in {DEFAULT_TYPES};"
    f" delete from visit_types where name not in {DEFAULT_TYPES}"
)
#: Tests that reach the Internet (launchpad's: launchpadlib's HTTP, which
#: requests_mock does not see): left out, only loopback is reached.
OFF_LOOPBACK = "not launchpad"
REFERENCE_RESET = (
    "truncate task_run, task, task_type, listed_origins, listers, origin_visit_stats,"
    " visit_scheduler_queue_position, scheduler_metrics cascade"
)


def listers_python(given: Path | None) -> Path:
    """The listers' interpreter, its virtualenv created and installed if missing."""
    if given is not None:
        return given
    python = VENV / "bin" / "python"
    probe = [str(python), "-c", "import swh.lister, swh.scheduler.api.client, requests_mock"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *PACKAGES], capture_output=True, text=True
    )
    if install.returncode != 0:
        # systemd-python (swh-core's logging extra) builds against libsystemd-dev
        raise SystemExit(f"cannot install {' '.join(PACKAGES)}:\n{install.stderr[-3000:]}")
    return python


def run_suite(python: Path, url: str, dsn: str, reset: str, only: str | None, out: Path) -> None:
    """swh-lister's tests against the server at ``url``; the JUnit report in ``out``."""
    env = {
        **os.environ,
        "LISTERS_SUITE_URL": url,
        "LISTERS_SUITE_DSN": dsn,
        "LISTERS_SUITE_RESET": reset,
        "PYTHONPATH": str(ROOT / "benchmarks"),
    }
    command = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:pytest_swh_scheduler",
        "-p",
        "no:cacheprovider",
        "-p",
        "swh.scheduler.pytest_plugin",
        "-p",
        "swh.core.github.pytest_plugin",
        "-p",
        "reference_listers_plugin",
        "--pyargs",
        "swh.lister",
        f"--junitxml={out}",
        "-k",
        f"({only}) and {OFF_LOOPBACK}" if only else OFF_LOOPBACK,
    ]
    with tempfile.TemporaryDirectory(prefix="listers-suite-") as workdir:
        subprocess.run(command, env=env, cwd=workdir, stdout=subprocess.DEVNULL, check=False)


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed / failed / error / skipped, the first line of why)."""
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = "failed" if tag == "failure" else tag
                message = (element.get("message") or "").strip()
                why = message.splitlines()[0][:200] if message else ""
                break
        # a test may fail its teardown after passing: the worst outcome counts
        if test not in found or found[test][0] == "passed":
            found[test] = (outcome, why)
    return found


def revisit_run(python: Path, only: str | None, out: Path) -> None:
    with bench_settings() as settings, serving_on_a_free_port(settings) as url:
        run_suite(python, url, settings.database_dsn(), REVISIT_RESET, only, out)


def reference_run(python: Path, only: str | None, out: Path) -> None:
    with bench_settings() as settings, reference_rpc(python, settings) as (url, dsn):
        run_suite(python, url, dsn, REFERENCE_RESET, only, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="pytest -k expression: a part of the suite")
    parser.add_argument("--listers-python", type=Path, help="an interpreter with swh-lister")
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args()
    python = listers_python(args.listers_python)
    workdir = ROOT / ".revisit" / "listers-suite"
    workdir.mkdir(parents=True, exist_ok=True)
    runs = {"revisit": revisit_run, "reference": reference_run}
    results: dict[str, dict[str, tuple[str, str]]] = {}
    for name, run in runs.items():
        if name == "reference" and args.skip_reference:
            continue
        report = workdir / f"{name}.xml"
        report.unlink(missing_ok=True)
        run(python, args.only, report)
        results[name] = outcomes(report)
        counts = Counter(outcome for outcome, _ in results[name].values())
        print(
            f"{name:>9}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['error']} errors, {counts['skipped']} skipped "
            f"({len(results[name])} tests)",
            flush=True,
        )
    if "reference" not in results:
        return
    worse = {
        test: result
        for test, result in results["revisit"].items()
        if result[0] != "passed" and results["reference"].get(test, ("",))[0] == "passed"
    }
    print(f"\npassing against the reference, not against revisit: {len(worse)}")
    for test, (outcome, why) in sorted(worse.items()):
        print(f"  {test}: {outcome}: {why}")


if __name__ == "__main__":
    main()
