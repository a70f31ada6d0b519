"""Visits per second per worker thread: the archive's swh-loader-git (``swh-git``)
against revisit's own ``git`` loader, same small repositories, same run (issue 31).

    python -m benchmarks.archive_loaders --repos 10 --visits 30 --threads 1

Small git repositories (one commit each) are served over http on 127.0.0.1;
``swh-git`` writes to a memory swh-storage (``embedded.archive_storage``, no
journal writer). Each of ``--threads`` threads calls the loader's ``load``
as a worker thread does, round robin over the repositories (the first visit of
each is eventful, the next ones uneventful); prints visits/s per thread for
each loader and their ratio. Needs the extra ``swh``.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import tempfile
import threading
import time
from pathlib import Path

from app.devtools import embedded
from app.devtools.demo import git, make_repo
from app.loaders.base import Loader, get_loader


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
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="revisit-archive-bench-"))
    for i in range(args.repos):
        make_repo(tmp / "forge" / f"r{i:03d}")
        git(tmp / "forge" / f"r{i:03d}", "update-server-info")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp / "forge"))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    forge = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=forge.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{forge.server_address[1]}"
    urls = [f"{base}/r{i:03d}/.git" for i in range(args.repos)]

    with embedded.archive_storage(tmp, None) as config:
        os.environ["SWH_CONFIG_FILENAME"] = str(config)
        os.environ["REVISIT_GIT_ALLOWED_SCHEMES"] = '["http"]'
        own = _rate(get_loader("git"), urls, args.visits, args.threads)
        archive = _rate(get_loader("git", "swh-git"), urls, args.visits, args.threads)
    forge.shutdown()
    load = os.getloadavg()[0]
    print(f"threads {args.threads}, {args.repos} repositories, load {load:.1f}")
    print(f"git (revisit's ls-remote)  {own:8.2f} visits/s per thread")
    print(f"swh-git (swh-loader-git)   {archive:8.2f} visits/s per thread")
    print(f"ratio                      {own / archive:8.1f}x")


if __name__ == "__main__":
    main()
