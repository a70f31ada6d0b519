"""The journal client's fold alone, without services: CPU seconds per message.

Replays ``--messages`` origin_visit_status records (benchmarks/journal_messages.py)
in batches as ``app.journal.write_batch`` folds them: per batch, the origins
with a final status are read from their stored visit history
(``decode_history``), folded (``apply_events``) and stored again
(``encode_history``); nothing else of a batch (decoding messages, PostgreSQL,
Redis) is counted. With more messages per origin than the end-to-end
benchmarks (``--origins``), origins hold the 8 recent visits production
keeps. Prints the CPU per message, and with ``--profile`` writes a cProfile
(CPU clock) of the folds.

    .venv/bin/python benchmarks/journal_fold.py --messages 200000 --origins 10000

Run copies of it in two trees one after the other for a before/after.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from msgspec.structs import astuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.db.history_codec import decode_history, encode_history
from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_stats import OriginStats, StatsPolicy, apply_events, keyed_fudge
from benchmarks.journal_messages import visit_statuses

POSITION = datetime(2026, 1, 1, tzinfo=UTC)


def events(messages: int, origins: int) -> list[VisitStatusEvent]:
    """The benchmark's records as decoded events, in date order."""
    out = []
    for value in visit_statuses(messages, origins):
        metadata = value["metadata"]
        out.append(
            VisitStatusEvent(
                value["origin"],
                value["type"],
                value["visit"],
                value["date"],
                value["status"],
                value["snapshot"],
                metadata,
            )
        )
    return out


def run(
    work: list[VisitStatusEvent], batch: int, policy: StatsPolicy, profile: str | None
) -> tuple[float, str]:
    """CPU seconds to fold ``work`` in batches, and a digest of the stored results."""
    fudge = keyed_fudge()
    stored: dict[tuple[str, str], tuple[OriginStats, bytes | None]] = {}
    profiler = cProfile.Profile(time.process_time) if profile else None
    cpu0 = time.process_time()
    if profiler:
        profiler.enable()
    for start in range(0, len(work), batch):
        by_key: dict[tuple[str, str], list[VisitStatusEvent]] = defaultdict(list)
        refolded = set()
        for event in work[start : start + batch]:
            key = (event.origin, event.visit_type)
            by_key[key].append(event)
            if event.is_final:
                refolded.add(key)
        for key in sorted(refolded):
            known = stored.get(key)
            if known is None:
                before = OriginStats(key[0], key[1])
            else:
                row, blob = known
                history = row.history if blob is None else decode_history(blob)
                before = OriginStats(
                    row.url,
                    row.visit_type,
                    row.tally,
                    history,
                    row.last_visit,
                    row.next_visit_queue_position,
                    row.next_visit_anchor,
                    row.disabled_for_failures,
                )
            update = apply_events(before, by_key[key], POSITION, policy, fudge)
            stored[key] = (update.stats, encode_history(update.stats.history))
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu = time.process_time() - cpu0
    digest = hashlib.sha256()
    for key in sorted(stored):
        stats, _blob = stored[key]
        history = stats.history
        for value in (
            *astuple(stats.tally),
            stats.next_visit_queue_position,
            stats.disabled_for_failures,
            stats.change_rate_per_day,
            *astuple(history.base),
            history.recent,
        ):
            # by value: a zero float may read back from a stored history as 0
            number = isinstance(value, int | float) and not isinstance(value, bool)
            digest.update(repr(float(value) if number else value).encode())
    return cpu, digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--origins", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--spacing", choices=["ladder", "age_optimal"], default="age_optimal")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the folds")
    parser.add_argument(
        "--cost-reference-s",
        type=float,
        default=None,
        help="a typical visit cost, as production measures one with its first multiplier "
        "(then every fold weighs the origin's visit cost)",
    )
    args = parser.parse_args()
    day = timedelta(days=1)
    policy = StatsPolicy(
        ladder_unit=day,
        min_interval=timedelta(hours=12),
        max_interval=64 * day,
        spacing=args.spacing,
        age_multiplier_s2=None if args.spacing == "ladder" else 1e-9,
        visit_cost_reference_s=args.cost_reference_s,
    )
    work = events(args.messages, args.origins)
    cpu, digest = run(work, args.batch_size, policy, args.profile)
    print(
        f"{len(work)} messages over {args.origins} origins: fold CPU {cpu:.2f} s, "
        f"{cpu / len(work) * 1e6:.1f} µs per message; results {digest} "
        f"(load {os.getloadavg()[0]:.2f})"
    )


if __name__ == "__main__":
    main()
