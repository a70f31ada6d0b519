"""The reference scheduler (swh-scheduler) choosing 1,000 next visits, on revisit's origins.

Runs under a separate virtualenv that has ``swh-scheduler`` installed (never a
dependency of revisit), against the same PostgreSQL server as revisit's
benchmark:

    python3 -m venv $HOME/swh-venv && $HOME/swh-venv/bin/pip install swh-scheduler==3.6.0
    $HOME/swh-venv/bin/python benchmarks/reference_scheduling.py --database-url DSN

``benchmarks/scheduling.py --reference-python $HOME/swh-venv/bin/python`` runs
it for you on its own embedded server and prints the ratios. This script
creates a fresh database on the server, builds the reference schema with the
reference's own machinery (swh.core's populate_database_for_package), loads
the origins of benchmarks/scheduling_data.py (same URLs, last_update and
visit history as revisit's benchmark) with COPY, and times
``SchedulerBackend.grab_next_visits`` for each policy, with and without the
10 % table sampling. Loading uses COPY rather than the reference's
record_listed_origins (about 6,500 origins/s): ingestion is not measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attr
import psycopg
from scheduling_data import VISIT_TYPE, origins
from swh.core.db.db_utils import populate_database_for_package
from swh.scheduler import get_scheduler

# The reference's superuser script creates the uuid-ossp extension for
# uuid_generate_v4(); the embedded PostgreSQL ships no uuid-ossp, so define
# that one function over the built-in gen_random_uuid() instead.
UUID_FUNCTION = (
    "create or replace function uuid_generate_v4() returns uuid"
    " language sql as 'select gen_random_uuid()'"
)
POLICIES = (
    "oldest_scheduled_first",
    "stop_after_success",
    "never_visited_oldest_update_first",
    "already_visited_order_by_lag",
    "origins_without_last_update",
    "first_visits_after_listing",
)
LISTED_AT = datetime(2024, 6, 1, tzinfo=UTC)
NOW = datetime.now(tz=UTC)


def create_database(admin_dsn: str) -> str:
    """A new database on the server of ``admin_dsn`` with the reference schema."""
    name = f"swh_reference_sched_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"create database {name}")
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo(**info)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(UUID_FUNCTION)
    populate_database_for_package("swh.scheduler", dsn)
    return dsn


def load(dsn: str, lister_id: uuid.UUID, count: int) -> None:
    """The origins and their visit stats, as the reference stores them."""
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        listed = (
            "copy listed_origins (lister_id, url, visit_type, extra_loader_arguments,"
            " enabled, first_seen, last_seen, last_update) from stdin"
        )
        stats = (
            "copy origin_visit_stats (url, visit_type, last_successful, last_visit,"
            " last_visit_status, last_scheduled, last_snapshot, next_visit_queue_position)"
            " from stdin"
        )
        visited = []
        with cur.copy(listed) as copy:
            for o in origins(count):
                first_seen = LISTED_AT + timedelta(seconds=o.index)
                copy.write_row(
                    (lister_id, o.url, VISIT_TYPE, "{}", True, first_seen, NOW, o.last_update)
                )
                if o.last_visit is not None:
                    visited.append(o)
        with cur.copy(stats) as copy:
            for o in visited:
                target = o.next_visit_queue_position
                copy.write_row(
                    (
                        o.url,
                        VISIT_TYPE,
                        o.last_successful,
                        o.last_visit,
                        "failed" if o.failed else "successful",
                        o.last_scheduled,
                        o.snapshot,
                        int(target.timestamp()) if target else None,
                    )
                )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("vacuum analyze")


def time_policy(
    scheduler: Any, policy: str, count: int, repeat: int, lister_id: uuid.UUID, sample: float | None
) -> dict[str, Any]:
    """Median time and returned count of ``repeat`` grabs of ``count`` visits."""
    times, returned = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        got = scheduler.grab_next_visits(
            VISIT_TYPE,
            count,
            policy,
            lister_uuid=str(lister_id) if policy == "first_visits_after_listing" else None,
            tablesample=sample,
        )
        times.append(time.perf_counter() - started)
        returned.append(len(got))
    return {
        "policy": policy,
        "tablesample": sample,
        "median_s": statistics.median(times),
        "times_s": times,
        "returned": returned,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True, help="admin DSN of the server")
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    dsn = create_database(args.database_url)
    scheduler = get_scheduler("postgresql", db=dsn)
    lister = scheduler.get_or_create_lister(name="bench", instance_name="forge")
    started = time.perf_counter()
    load(dsn, lister.id, args.origins)
    print(f"reference: loaded {args.origins} origins in {time.perf_counter() - started:.0f} s")
    scheduler.visit_scheduler_queue_position_set(VISIT_TYPE, int(NOW.timestamp()))
    # A lister that has finished its listing, as first_visits_after_listing expects.
    lister = scheduler.update_lister(attr.evolve(lister, last_listing_finished_at=NOW))
    with psycopg.connect(dsn) as conn:
        row = conn.execute("show server_version").fetchone()
    results = []
    for sample in (None, 0.1):
        for policy in POLICIES:
            r = time_policy(scheduler, policy, args.count, args.repeat, lister.id, sample)
            results.append(r)
            print(
                f"reference grab_next_visits {policy}"
                f"{' tablesample 10%' if sample else ''}: {r['median_s'] * 1000:,.0f} ms"
                f" median of {args.repeat}, returned {r['returned']} of {args.count}"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"server_version": row[0] if row else "", "results": results}, out)


if __name__ == "__main__":
    main()
