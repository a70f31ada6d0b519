"""The reference journal client (swh-scheduler's process_journal_objects) on the same records.

Runs under a separate virtualenv that has ``swh-scheduler`` installed (never a
dependency of revisit):

    python3 -m venv $HOME/swh-venv && $HOME/swh-venv/bin/pip install swh-scheduler
    $HOME/swh-venv/bin/python benchmarks/reference_journal.py --database-url DSN

It creates its own database on the given PostgreSQL server, builds the
reference schema there, lists the same origins, and feeds the records of
benchmarks/journal_messages.py to process_journal_objects in batches, as its
journal client does after decoding. Only that processing is timed: no Kafka,
no msgpack decoding, which favours the reference.
"""

from __future__ import annotations

import argparse
import time
import uuid

import psycopg
from journal_messages import START, VISIT_TYPE, origin_url, visit_statuses
from swh.core.db.db_utils import populate_database_for_package
from swh.scheduler import get_scheduler
from swh.scheduler.journal_client import process_journal_objects
from swh.scheduler.model import ListedOrigin

# The reference's superuser script creates the uuid-ossp extension for
# uuid_generate_v4(); the embedded PostgreSQL ships no uuid-ossp, so define
# that one function over the built-in gen_random_uuid() instead.
UUID_FUNCTION = (
    "create or replace function uuid_generate_v4() returns uuid"
    " language sql as 'select gen_random_uuid()'"
)


def create_database(admin_dsn: str) -> str:
    name = f"swh_reference_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"create database {name}")
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo(**info)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(UUID_FUNCTION)
    populate_database_for_package("swh.scheduler", dsn)
    return dsn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True, help="admin DSN of the server")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--origins", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=10000)
    args = parser.parse_args()

    dsn = create_database(args.database_url)
    scheduler = get_scheduler("postgresql", db=dsn)
    lister = scheduler.get_or_create_lister(name="bench", instance_name="forges")
    for start in range(0, args.origins, 10000):
        scheduler.record_listed_origins(
            ListedOrigin(lister_id=lister.id, url=origin_url(i), visit_type=VISIT_TYPE)
            for i in range(start, min(args.origins, start + 10000))
        )
    scheduler.visit_scheduler_queue_position_set(VISIT_TYPE, int(START.timestamp()))
    records = visit_statuses(args.messages, args.origins)

    started = time.perf_counter()
    for start in range(0, len(records), args.batch_size):
        batch = records[start : start + args.batch_size]
        process_journal_objects({"origin_visit_status": batch}, scheduler=scheduler)
    elapsed = time.perf_counter() - started
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select count(*) from origin_visit_stats").fetchone()
    print(f"reference stats rows: {row[0] if row else 0}")
    print(
        f"reference process_journal_objects: {args.messages} messages in {elapsed:.2f}s"
        f" = {args.messages / elapsed:,.0f} messages/s"
    )


if __name__ == "__main__":
    main()
