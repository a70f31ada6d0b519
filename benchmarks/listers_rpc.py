"""Origins recorded per second by a lister: RPC server, actor API and CLI (issue 15).

    python -m benchmarks.listers_rpc --origins 100000 --batch 1000 \
        --reference .revisit/swh-reference/bin/python

On throwaway services (app.devtools.embedded), three runs of each path over the same
origins, each on emptied tables and Redis:

- rpc: the reference's own client (``tests/reference/lister_client.py``,
  in its own virtualenv: tests/reference/venv.py) calls ``origins/record``
  with batches of ``--batch`` origins against ``revisit rpc`` (in this
  process, its own threads); timed by the client, from its first call to
  its last answer;
- actor: ``record_listed_origins`` messages of ``--batch`` origins sent to
  the ``revisit api`` process (2 threads); timed from the first send until
  PostgreSQL holds every origin;
- reference (the baseline): the same client against the reference's own RPC
  server and PostgreSQL backend (benchmarks/reference_rpc_server.py, a fresh
  database of its own on the same server each run);
- cli: ``revisit origins import`` of the same origins as JSON lines (its
  default batches of 50,000), process start included.

Prints each run, then the median of 3 per path, with the load average and the
ratio to the reference's median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from app.db.connection import connect
from app.listers.client import ListerClient
from app.listers.interface import ListerInterface
from app.rpc.server import serving_on_a_free_port
from app.services.context import Context
from app.settings import Settings
from benchmarks.common import bench_settings, reference_rpc

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "tests" / "reference" / "lister_client.py"


def origin(i: int) -> dict[str, object]:
    """The i-th origin, as tests/reference/lister_client.py makes it."""
    row: dict[str, object] = {
        "url": f"https://forge.example/group-{i // 100}/project-{i}.git",
        "visit_type": "git",
    }
    if i % 2:
        row["last_update"] = "2026-01-01T00:00:00+00:00"
    if i % 3 == 0:
        row["extra_loader_arguments"] = {"n": i}
    return row


def reset(settings: Settings) -> None:
    """Empty what a run writes, so each run records new origins."""
    with psycopg.connect(settings.database_dsn(), autocommit=True) as conn:
        conn.execute("truncate listed_origins, origin_visit_stats, lister_runs, listers cascade")
    Context.from_settings(settings).redis.flushdb()


def service_env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "REVISIT_DATABASE_URL": settings.database_dsn(),
        "REVISIT_REDIS_URL": settings.redis_dsn(),
        "REVISIT_KAFKA_BROKERS": settings.kafka_brokers,
        "REVISIT_WORKER_VISIT_TYPES_ALLOW": '["git"]',
    }


def run_rpc(settings: Settings, reference: Path, count: int, batch: int) -> float:
    with serving_on_a_free_port(settings) as url:
        done = subprocess.run(
            [str(reference), str(CLIENT), url, "record", str(count), str(batch), "rpc"],
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(done.stdout)
    assert result["recorded"] == count, result
    return count / float(result["elapsed_s"])


def run_reference(settings: Settings, reference: Path, count: int, batch: int) -> float:
    """The same client against the reference's own RPC server and PostgreSQL backend."""
    with reference_rpc(reference, settings) as (url, _):
        done = subprocess.run(
            [str(reference), str(CLIENT), url, "record", str(count), str(batch), "reference"],
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(done.stdout)
    assert result["recorded"] == count, result
    return count / float(result["elapsed_s"])


def _recorded(settings: Settings) -> int:
    with psycopg.connect(settings.database_dsn()) as conn:
        row = conn.execute("select count(*) from listed_origins").fetchone()
    return int(row[0]) if row else 0


def run_actor(settings: Settings, count: int, batch: int, logdir: Path) -> float:
    with connect(settings) as conn:
        ctx = Context.from_settings(settings)
        lister = ListerInterface(conn, ctx, lambda: datetime.now(tz=UTC)).get_or_create_lister(
            "bench", "actor"
        )
    client = ListerClient.from_settings(settings)
    log = (logdir / "api.log").open("ab")
    api = subprocess.Popen(
        [sys.executable, "-m", "app", "api", "--threads", "2"],
        env=service_env(settings),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(3)  # let the workers boot before the clock starts
        started = time.perf_counter()
        for start in range(0, count, batch):
            rows = [{**origin(i), "lister_id": str(lister.id)} for i in range(start, start + batch)]
            client.record_listed_origins(rows)
        while _recorded(settings) < count:
            time.sleep(0.05)
        return count / (time.perf_counter() - started)
    finally:
        api.terminate()
        api.wait(30)


def run_cli(settings: Settings, count: int, workdir: Path) -> float:
    listing = workdir / "listing.jsonl"
    with listing.open("w") as f:
        for i in range(count):
            f.write(json.dumps(origin(i)) + "\n")
    env = service_env(settings)
    register = [sys.executable, "-m", "app", "lister", "register", "bench", "cli"]
    subprocess.run(register, env=env, check=True, capture_output=True)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "app", "origins", "import", str(listing), "--lister", "bench/cli"],
        env=env,
        check=True,
        capture_output=True,
    )
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--origins", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--reference", type=Path, default=ROOT / ".revisit/swh-reference/bin/python"
    )
    args = parser.parse_args()
    workdir = ROOT / ".revisit" / "bench-listers"
    workdir.mkdir(parents=True, exist_ok=True)
    rates: dict[str, list[float]] = {"rpc": [], "reference": [], "actor": [], "cli": []}
    with bench_settings() as settings:
        for run in range(1, 4):
            for path in rates:
                reset(settings)
                if path == "rpc":
                    rate = run_rpc(settings, args.reference, args.origins, args.batch)
                elif path == "reference":
                    rate = run_reference(settings, args.reference, args.origins, args.batch)
                elif path == "actor":
                    rate = run_actor(settings, args.origins, args.batch, workdir)
                else:
                    rate = run_cli(settings, args.origins, workdir)
                rates[path].append(rate)
                load = os.getloadavg()[0]
                print(f"run {run} {path}: {rate:,.0f} origins/s (load average {load:.2f})")
    baseline = statistics.median(rates["reference"])
    loads = os.getloadavg()
    print(
        f"\n{args.origins} origins, batches of {args.batch} (rpc, actor); load average "
        f"{loads[0]:.2f} {loads[1]:.2f} {loads[2]:.2f}"
    )
    for path, values in rates.items():
        median = statistics.median(values)
        print(f"{path:>5}: median {median:,.0f} origins/s, {median / baseline:.2f}x the reference")


if __name__ == "__main__":
    main()
