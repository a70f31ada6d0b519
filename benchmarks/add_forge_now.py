"""Seconds from adding a forge to the last first visit of its origins (issue 36).

    python -m benchmarks.add_forge_now --repos 50 --backlog 2000 --queue-length 20 --runs 3

On throwaway services (app.devtools.embedded), a forge of ``--repos`` local git
repositories (the ``gitdir`` lister) is added, ``--runs`` times each way, on
emptied tables and Redis, beside a recurrent backlog of ``--backlog``
never-visited origins listed before it (updated long ago, so first in the
never-visited pool; their visits end not_found), with queues bounded to
``--queue-length`` messages (git's ``max_queue_length``) as a busy archive's
are full:

- add forge now: ``app.listers.forges.add_forge`` (``revisit forge add``);
  the first visits are requests, served by the priority lane;
- plain listing: ``schedule_lister`` with its first run now (``revisit lister
  schedule``); the recurrent scheduler first-visits what it listed.

Both run the same processes: the lister worker, the scheduler, the journal
client, a priority-lane and a recurrent (express and slow lanes) worker of 2
threads each; the lister scheduler's step is run here, at once. A run ends when every forge
origin has a final visit (or after ``--timeout`` s); its figure is the last
such visit's date minus the moment the forge was added. Prints each run, then
the median per way with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import redis

from actors.lister_scheduler import ListerScheduler
from app.db.connection import connect
from app.db.listings import register_lister
from app.db.migrate import migrate
from app.devtools.demo import make_forge
from app.inputs.api import AddForge
from app.inputs.listing import ListedOriginIn
from app.listers.forges import add_forge
from app.listers.runs import schedule_lister
from app.services.context import Context
from app.services.listing import record_listed_origins
from app.settings import Settings
from benchmarks.common import bench_settings
from tests.processes import running, with_constants

PROCESSES = {
    "lister_worker": ["revisit", "lister", "worker"],
    "scheduler": ["revisit", "scheduler"],
    "priority": ["revisit", "worker", "--lane", "priority", "--threads", "2"],
    "recurrent": ["revisit", "worker", "--lane", "recurrent", "--threads", "2"],
    "journal": ["revisit", "journal"],
}


def fresh(base: Settings) -> Settings:
    """``base`` on an emptied schema and Redis, with its own journal topic."""
    with psycopg.connect(base.database_dsn(), autocommit=True) as conn:
        conn.execute("drop schema public cascade")
        conn.execute("create schema public")
    migrate(base.database_dsn())
    redis.Redis.from_url(base.redis_dsn()).flushall()
    suffix = uuid.uuid4().hex[:8]
    return base.model_copy(
        update={
            "journal_topic": f"journal-{suffix}",
            "dead_letter_topic": f"dead-letter-{suffix}",
            "journal_group_id": f"group-{suffix}",
        }
    )


def environment(settings: Settings) -> dict[str, str]:
    values = {
        "REVISIT_DATABASE_URL": settings.database_dsn(),
        "REVISIT_REDIS_URL": settings.redis_dsn(),
        "REVISIT_KAFKA_BROKERS": settings.kafka_brokers,
        "REVISIT_JOURNAL_TOPIC": settings.journal_topic,
        "REVISIT_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
        "REVISIT_JOURNAL_GROUP_ID": settings.journal_group_id,
        "REVISIT_WORKER_VISIT_TYPES_ALLOW": '["git"]',
        "REVISIT_ALLOWED_INTERNAL_HOSTS": '["localhost", "127.0.0.1"]',
    }
    os.environ.update(values)
    return with_constants({"actors.scheduler.POLL_INTERVAL_S": 0.2}, values)


def list_backlog(settings: Settings, root: Path, count: int, queue_length: int) -> None:
    old = datetime(2000, 1, 1, tzinfo=UTC)
    rows = [
        (
            i + 1,
            ListedOriginIn(
                url=(root / f"gone-{i:05d}").as_uri(), visit_type="git", last_update=old
            ),
        )
        for i in range(count)
    ]
    with connect(settings) as conn:
        conn.execute(
            "update visit_types set max_queue_length = %s where name = 'git'", (queue_length,)
        )
        lister = register_lister(conn, "bench", "backlog", None)
        record_listed_origins(
            conn, Context.from_settings(settings), lister, rows, datetime.now(tz=UTC)
        )


def one_run(
    way: str, settings: Settings, forge: Path, urls: list[str], timeout_s: float, logs: Path
) -> float:
    """Seconds from adding the forge to its last first visit (inf if not all done)."""
    env = environment(settings)
    with running(PROCESSES, env, logs), connect(settings) as conn:
        time.sleep(3.0)  # the processes up
        added = datetime.now(tz=UTC)
        if way == "add forge now":
            forge_in = AddForge(
                lister="gitdir",
                instance="forge",
                url=forge.as_uri(),
                arguments={"path": str(forge)},
            )
            add_forge(conn, forge_in, added)
        else:
            schedule_lister(
                conn, "gitdir", "forge", added, arguments={"path": str(forge)}, first_run=added
            )
        ListerScheduler(settings).step(datetime.now(tz=UTC))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            row = conn.execute(
                "select count(last_final_date) as done, max(last_final_date) as last"
                " from origin_visit_stats where url = any(%s)",
                (urls,),
            ).fetchone()
            assert row is not None
            if row["done"] == len(urls):
                return float((row["last"] - added).total_seconds())
            time.sleep(0.2)
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=int, default=50)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queue-length", type=int, default=20, help="git's max_queue_length")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    # The forge is on local disk (file:// URLs), as in the tests.
    os.environ["REVISIT_ALLOWED_INTERNAL_HOSTS"] = '["localhost", "127.0.0.1"]'
    figures: dict[str, list[float]] = {"add forge now": [], "plain listing": []}
    loads: dict[str, list[float]] = {way: [] for way in figures}
    with tempfile.TemporaryDirectory() as tmp, bench_settings() as base:
        root = Path(tmp)
        urls = make_forge(root / "forge", args.repos)
        for run in range(args.runs):
            for way in figures:
                settings = fresh(base)
                list_backlog(settings, root / "backlog", args.backlog, args.queue_length)
                logs = root / f"logs-{run}-{way.replace(' ', '-')}"
                logs.mkdir()
                seconds = one_run(way, settings, root / "forge", urls, args.timeout, logs)
                load = os.getloadavg()[0]
                figures[way].append(seconds)
                loads[way].append(load)
                print(f"run {run + 1} {way}: {seconds:.1f} s (load {load:.2f})", flush=True)
    for way, values in figures.items():
        print(
            f"{way}: median {statistics.median(values):.1f} s over {len(values)} runs"
            f" (loads {', '.join(f'{x:.2f}' for x in loads[way])}), {args.repos} repositories,"
            f" backlog {args.backlog}, queues of {args.queue_length}"
        )


if __name__ == "__main__":
    main()
