"""Visits per second per worker thread: the archive's swh-loader-git (``swh-git``)
against revisit's own ``git`` loader, same small repositories, same run (issue 31).

    python -m benchmarks.archive_loaders --repos 10 --visits 30 --threads 1

Small git repositories (one commit each) are served over http on 127.0.0.1;
``swh-git`` writes to a memory swh-storage (``embedded.archive_storage``, no
journal writer). Each of ``--threads`` threads calls the loader's ``load``
as a worker thread does, round robin over the repositories (the first visit of
each is eventful, the next ones uneventful); prints visits/s per thread for
each loader and their ratio. Needs the extra ``swh``.

With ``--lag-seconds S``, it then runs the scheduler, a worker (``--threads``)
and the journal client for ``S`` seconds on the same repositories with
``swh-git``, the storage's journal writer feeding the journal client, and
prints the journal lag: from the archive's final status (its date, when the
loader wrote it) to the origin's stats row in PostgreSQL having folded it
(polled every 10 ms; the journal client re-places the origin in Redis in the
same batch, right after), p50 and p99.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from app.db.connection import connect
from app.db.listings import register_lister
from app.devtools import embedded
from app.devtools.demo import git, make_repo
from app.inputs.listing import ListedOriginIn
from app.loaders.base import Loader, get_loader
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.services.visit_types import VisitTypeChange, set_visit_type
from app.settings import get_settings
from benchmarks.common import bench_settings
from tests.processes import running, with_constants


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _rate(loader: Loader, urls: list[str], visits: int, threads: int) -> float:
    """Visits/s per thread: ``visits`` per thread, round robin over ``urls``."""
    failures: list[str] = []

    def work() -> None:
        for k in range(visits):
            result = loader.load(urls[k % len(urls)], {}, 60)
            if result.status != "full":
                failures.append(f"{result.status}: {result.error}")

    started = time.monotonic()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - started
    if failures:
        raise SystemExit(f"visits failed: {failures[:3]}")
    return visits / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=int, default=10)
    parser.add_argument("--visits", type=int, default=30, help="visits per thread and loader")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lag-seconds", type=float, default=0.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="revisit-archive-bench-"))
    for i in range(args.repos):
        make_repo(tmp / "forge" / f"r{i:03d}")
        git(tmp / "forge" / f"r{i:03d}", "update-server-info")
    handler = functools.partial(_Quiet, directory=str(tmp / "forge"))
    forge = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=forge.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{forge.server_address[1]}"
    urls = [f"{base}/r{i:03d}/.git" for i in range(args.repos)]

    with embedded.archive_storage(tmp, None) as config:
        os.environ["SWH_CONFIG_FILENAME"] = str(config)
        os.environ["REVISIT_ALLOWED_INTERNAL_HOSTS"] = '["127.0.0.1"]'
        get_settings.cache_clear()
        own = _rate(get_loader("git"), urls, args.visits, args.threads)
        archive = _rate(get_loader("git", "swh-git"), urls, args.visits, args.threads)
    load = os.getloadavg()[0]
    print(f"threads {args.threads}, {args.repos} repositories, load {load:.1f}")
    print(f"git (revisit's ls-remote)  {own:8.2f} visits/s per thread")
    print(f"swh-git (swh-loader-git)   {archive:8.2f} visits/s per thread")
    print(f"ratio                      {own / archive:8.1f}x")
    if args.lag_seconds:
        lags = _journal_lags(tmp, urls, args.lag_seconds, args.threads)
        p50, p99 = statistics.quantiles(lags, n=100)[49], statistics.quantiles(lags, n=100)[98]
        print(f"journal lag over {len(lags)} visits: p50 {p50:.3f}s, p99 {p99:.3f}s")
    forge.shutdown()


def _journal_lags(tmp: Path, urls: list[str], seconds: float, threads: int) -> list[float]:
    """Seconds from each archive final status to its fold into the stats row."""
    from swh.storage import get_storage

    with bench_settings() as settings, contextlib.ExitStack() as stack:
        config = stack.enter_context(embedded.archive_storage(tmp, settings.kafka_brokers, "bench"))
        env = with_constants(
            {"actors.scheduler.POLL_INTERVAL_S": 0.2},
            {
                "REVISIT_DATABASE_URL": settings.database_dsn(),
                "REVISIT_REDIS_URL": settings.redis_dsn(),
                "REVISIT_KAFKA_BROKERS": settings.kafka_brokers,
                "REVISIT_JOURNAL_TOPIC": "bench.origin_visit_status",
                "REVISIT_WORKER_VISIT_TYPES_ALLOW": '["git"]',
                "REVISIT_LADDER_UNIT_S": "0.5",
                "SWH_CONFIG_FILENAME": str(config),
            },
        )
        with connect(settings) as conn:
            set_visit_type(conn, VisitTypeChange(name="git", loader="swh-git"))
            lister = register_lister(conn, "bench", "forge", None)
            rows = [(i + 1, ListedOriginIn(url=u, visit_type="git")) for i, u in enumerate(urls)]
            ctx = Context.from_settings(settings)
            record_listed_origins(conn, ctx, lister, rows, datetime.now(tz=UTC))
            folded: dict[tuple[str, int], float] = {}
            logs = tmp / "logs"
            logs.mkdir(exist_ok=True)
            procs = {
                "scheduler": ["revisit", "scheduler"],
                "worker": ["revisit", "worker", "--lane", "all", "--threads", str(threads)],
                "journal": ["revisit", "journal"],
            }
            with running(procs, env, logs):
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    now = time.time()
                    for r in conn.execute("select url, last_visit_number from origin_visit_stats"):
                        if r["last_visit_number"] is not None:
                            folded.setdefault((r["url"], int(r["last_visit_number"])), now)
                    time.sleep(0.01)
        storage = get_storage(**json.loads(config.read_text())["storage"])
        lags = []
        for (url, visit), seen in folded.items():
            status = storage.origin_visit_status_get_latest(url, visit)
            if status is not None:
                lags.append(seen - status.date.timestamp())
        return lags


if __name__ == "__main__":
    main()
