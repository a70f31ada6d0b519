"""The growth curve: every figure of the issue 13 table at one archive size.

    python -m benchmarks.growth --origins 1000000 --json growth-1m.json

On fresh embedded services (or the REVISIT_* addresses): imports ``--origins``
git origins of benchmarks/scheduling_data.py (the CLI's import: IMPORT_WRITERS writers,
batches of 50,000), writes their visit history, then measures the mirror
rebuild, Redis and PostgreSQL bytes per origin, the pop of 1,000 as the
Python caller sees it, sustained scheduling (schedule_step + enqueue_many,
1,000 a step) and the journal client on ``--journal-messages`` statuses
spread over the listed origins. Prints one line per figure; ``--json``
writes them for benchmarks/run_all.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from app.db.connection import DictConnection, connect
from app.db.listings import register_lister
from app.inputs.listing import batches
from app.kafka.client import ensure_topics
from app.services.context import Context
from app.services.listing import IMPORT_WRITERS, import_listing
from app.services.mirror_sync import rebuild
from app.settings import Settings
from benchmarks.common import bench_settings
from benchmarks.journal_throughput import consume_all, prefill
from benchmarks.scheduling import (
    DEFAULT_WEIGHTS,
    listing,
    now,
    pop_latencies,
    steps_breakdown,
    write_history,
)
from benchmarks.scheduling_data import VISIT_TYPE, origin_url

IMPORT_BATCH = 50_000
PG_TABLES = ("origin_visit_stats", "listed_origins")


def timed_import(conn: DictConnection, ctx: Context, settings: Settings, count: int) -> float:
    """Seconds to import ``count`` origins as ``revisit origins import`` does, from
    a listing file written beforehand (making up the origins is not the import's
    work: it took 4.7 s of the interpreter for 1M)."""
    lister = register_lister(conn, "bench", "forge", None)
    extra = [connect(settings) for _ in range(IMPORT_WRITERS - 1)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "listing.jsonl"
        with path.open("w", encoding="utf-8") as out:
            out.writelines(line + "\n" for line in listing(count))
        started = time.perf_counter()
        with path.open(encoding="utf-8", errors="surrogateescape") as lines:
            parsed = batches(lines, IMPORT_BATCH, csv_format=False)
            report = import_listing(conn, ctx, lister, parsed, now, extra)
        elapsed = time.perf_counter() - started
    for connection in extra:
        connection.close()
    assert report.recorded == count and not report.refused
    return elapsed


def postgres_bytes(conn: DictConnection) -> int:
    """Bytes of the scheduling tables with their indexes and TOAST."""
    row = conn.execute(
        "select sum(pg_total_relation_size(t::regclass))::bigint as n from unnest(%(t)s::text[]) t",
        {"t": list(PG_TABLES)},
    ).fetchone()
    return int(row["n"]) if row else 0


def journal_rate(settings: Settings, count: int, messages: int) -> float:
    """Messages/s of the journal client on statuses spread over the listed origins."""
    origins = min(count, max(1, messages // 5))
    stride = count // origins
    name = uuid.uuid4().hex[:8]
    journal = settings.model_copy(
        update={
            "journal_topic": f"growth-journal-{name}",
            "dead_letter_topic": f"growth-dead-{name}",
            "journal_group_id": f"growth-{name}",
        }
    )
    ensure_topics(journal)
    prefill(journal, messages, origins, url_of=lambda i: origin_url(i * stride))
    elapsed = consume_all(journal, messages, None)[0]
    return messages / elapsed


def flush(ctx: Context) -> None:
    """Empty Redis and wait until its memory is freed: a FLUSHDB of 10M origins
    outlasts the client's socket timeout, so it is done in the background."""
    ctx.redis.flushdb(asynchronous=True)
    while int(ctx.redis.info("memory")["lazyfree_pending_objects"]):
        time.sleep(0.1)


class Figures(dict[str, float]):
    """The figures measured so far, each printed as soon as it is known (a 10M run
    takes long enough that a partial result is worth having)."""

    def __setitem__(self, name: str, value: float) -> None:
        print(f"{name}: {value:,.1f}", flush=True)
        super().__setitem__(name, value)


def measure(settings: Settings, count: int, journal_messages: int) -> dict[str, float]:
    """Every figure of the growth table at ``count`` origins."""
    ctx = Context.from_settings(settings)
    ctx.redis.flushdb()
    base_memory = int(ctx.redis.info("memory")["used_memory"])
    figures = Figures()
    figures["origins"] = count
    with connect(settings) as conn:
        figures["import_rate"] = count / timed_import(conn, ctx, settings, count)
        write_history(conn, count)
        flush(ctx)
        started = time.perf_counter()
        rebuild(conn, ctx, VISIT_TYPE, now())
        figures["rebuild_s"] = time.perf_counter() - started
        mirrored = sum(ctx.mirror.sizes(VISIT_TYPE).values())
        used = int(ctx.redis.info("memory")["used_memory"]) - base_memory
        figures["redis_bytes_per_origin"] = used / mirrored
        figures["postgres_bytes_per_origin"] = postgres_bytes(conn) / count
        pops, _server = pop_latencies(ctx, DEFAULT_WEIGHTS, 50, 1000)
        figures["pop_ms"] = statistics.median(pops) * 1000
        figures["scheduling_rate"] = steps_breakdown(conn, ctx, settings, 1000, 10)
    figures["journal_rate"] = journal_rate(settings, count, journal_messages)
    return dict(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=1_000_000)
    parser.add_argument("--journal-messages", type=int, default=200_000)
    parser.add_argument("--json", metavar="FILE", help="also write the figures there")
    args = parser.parse_args()
    with bench_settings() as settings:
        figures = measure(settings, args.origins, args.journal_messages)
    if args.json:
        Path(args.json).write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
