"""The soak seen as an operator sees it: a real Prometheus scrapes every process,
save code now requests arrive now and then, and the dashboard is drawn at the end.

    python -m benchmarks.soak --origins 3000 --seconds 600 --settle-s 60 \\
        --faults poison,kill_journal,postgres --fault-every-s 60 \\
        --dashboard monitoring/dashboard.png

This is how ``monitoring/dashboard.png`` is made (``monitoring/README.md``).
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from app.client import RevisitClient
from app.devtools.embedded import free_port
from app.settings import Settings
from monitoring.prometheus_api import api

PROMETHEUS_DIR = Path(__file__).resolve().parents[1] / "monitoring" / "prometheus"
#: Periodic figures often enough to draw (the defaults suit a real archive).
METRICS_CONSTANTS = {
    "monitoring.coverage.REFRESH_INTERVAL_S": 5,
    "monitoring.coverage.POOLS_BY_LISTER_INTERVAL_S": 30,
    "monitoring.coverage.NEVER_VISITED_THRESHOLD_S": 60,
}
SCRAPE_S = 2
#: Rates over this window in the picture (Grafana's $__rate_interval).
RATE_WINDOW = "30s"
#: One save code now request this often, on a random origin.
REQUEST_EVERY_S = 5.0


def metrics_env(names: list[str]) -> dict[str, dict[str, str]]:
    """Each process's own metrics port (and Dramatiq multiprocess directory)."""
    return {name: {"REVISIT_METRICS_PORT": str(free_port())} for name in names}


@contextlib.contextmanager
def prometheus(targets: dict[str, dict[str, str]], workdir: Path) -> Iterator[str]:
    """A Prometheus scraping every process of ``targets`` (name -> env with its
    port) every SCRAPE_S, with the alert rules; yields its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("--dashboard needs prometheus on the PATH (scripts/setup installs it)")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "rule_files": [str(PROMETHEUS_DIR / "alerts.yml")],
        "scrape_configs": [
            {
                "job_name": f"revisit-{name}",
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
            }
            for name, env in targets.items()
            for port in env.values()
        ],
    }
    path = workdir / "prometheus.yml"
    path.write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (workdir / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_ready(url, proc)
            yield url
        finally:
            proc.terminate()
            proc.wait(30)


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"Prometheus did not start (exit code {proc.poll()})")


def targets_up(url: str) -> int:
    """How many scrape targets answer."""
    return sum(t["health"] == "up" for t in api(url, "targets")["activeTargets"])


class Requests:
    """Save code now requests, one every REQUEST_EVERY_S on a random soak origin."""

    def __init__(self, settings: Settings, urls: list[str], rng: random.Random) -> None:
        self.client = RevisitClient.from_settings(settings)
        self.urls = urls
        self.rng = rng
        self.sent = 0
        self._next = time.monotonic()

    def tick(self, visit_type: str) -> None:
        """Send the next request when it is due (a broker away: try next time)."""
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + REQUEST_EVERY_S
        with contextlib.suppress(Exception):
            self.client.request_visit(url=self.rng.choice(self.urls), visit_type=visit_type)
            self.sent += 1


def draw(url: str, path: Path, started_at: float) -> None:
    """The dashboard over the whole run, to ``path``."""
    from monitoring.render import render_png

    end = time.time()
    step_s = max(SCRAPE_S, (end - started_at) / 400)
    render_png(url, path, started_at, end, step_s, RATE_WINDOW)
