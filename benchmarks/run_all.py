"""Rerun the issue 13 benchmarks and print one table: the median of 3 runs of each
figure, the load average beside it, the ratio to the reference measured in the
same runs.

    benchmarks/run_all                       # everything (about an hour at 10M)
    benchmarks/run_all --sizes 100000,1000000 --skip-reference

The reference (swh-scheduler 3.6.0) is installed into its own virtualenv
(``--reference-venv``, created on first use), never into revisit's. Every
benchmark runs as its own process on fresh embedded services; each run's
1-minute load average is read before and after it, and the larger is shown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REFERENCE_PACKAGE = "swh-scheduler==3.6.0"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Figures:
    """The runs of one benchmark command: each run's figures and load average."""

    runs: list[dict[str, float]] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def median(self, name: str) -> float | None:
        """Median of ``name`` over the runs that measured it."""
        values = [r[name] for r in self.runs if name in r]
        return statistics.median(values) if values else None

    def load(self) -> str:
        """The load averages of the runs, as printed beside their figures."""
        return "/".join(f"{load:.1f}" for load in self.loads)


def reference_python(venv: Path) -> str:
    """The interpreter of a virtualenv holding the reference; created if missing."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import swh.scheduler.journal_client"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(python)
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", REFERENCE_PACKAGE], check=True)
    return str(python)


def run(command: list[str], runs: int) -> Figures:
    """``runs`` runs of a benchmark module that writes its figures with --json."""
    figures = Figures()
    for index in range(runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            before = os.getloadavg()[0]
            print(f"# run {index + 1}/{runs}: {' '.join(command)}", flush=True)
            subprocess.run(
                [sys.executable, "-m", *command, "--json", out.name], check=True, cwd=ROOT
            )
            figures.loads.append(max(before, os.getloadavg()[0]))
            figures.runs.append(json.loads(Path(out.name).read_text() or "{}"))
    return figures


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


GROWTH_ROWS = [
    ("import_rate", "origins/s"),
    ("rebuild_s", "s"),
    ("pop_ms", "ms"),
    ("scheduling_rate", "visits/s"),
    ("journal_rate", "messages/s"),
    ("redis_bytes_per_origin", "B"),
    ("postgres_bytes_per_origin", "B"),
]


def print_growth(sizes: dict[int, Figures]) -> None:
    print("\n| figure | " + " | ".join(f"{n:,} origins" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, unit in GROWTH_ROWS:
        cells = [fmt(f.median(name), unit) for f in sizes.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        "| runs (load average) | "
        + " | ".join(f"{len(f.runs)} ({f.load()})" for f in sizes.values())
        + " |"
    )


def print_journal(journal: Figures, messages: int, clients: int) -> None:
    ours = journal.median("journal_rate")
    print(
        f"\njournal client ({clients} process{'es' if clients > 1 else ''}),"
        f" {messages:,} messages over {messages // 5:,} origins:"
        f" {fmt(ours, 'messages/s')}"
        f" (load {journal.load()})"
    )
    cpu = journal.median("journal_client_cpu_us")
    if cpu is not None:
        print(f"client CPU (median): {cpu:.0f} µs a message")
    writes = journal.median("journal_row_writes")
    if writes is not None:
        print(f"stats row writes (median): {writes:,.0f}, {writes / messages:.3f} a message")
    ratios = [
        r["journal_rate"] / r["reference_journal_rate"]
        for r in journal.runs
        if "reference_journal_rate" in r
    ]
    if ratios:
        theirs = journal.median("reference_journal_rate")
        print(
            f"reference process_journal_objects, same runs: {fmt(theirs, 'messages/s')};"
            f" ratio (median of the runs' ratios) {statistics.median(ratios):.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--runs-above-1m", type=int, default=1, help="runs of sizes > 1M")
    parser.add_argument("--reference-venv", type=Path, default=Path.home() / "swh-venv")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--journal-messages", type=int, default=1_000_000)
    parser.add_argument(
        "--journal-clients",
        default="1,2",
        help="journal client processes in the group, comma-separated: one figure each"
        " (1 is the reference's set-up, 2 the Procfile's: one per core)",
    )
    parser.add_argument(
        "--parts",
        default="journal,workers,growth",
        help="which benchmarks to run, comma-separated (default: all three)",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if unknown := parts - {"journal", "workers", "growth"}:
        parser.error(f"--parts: unknown {', '.join(sorted(unknown))} (journal, workers, growth)")

    try:
        clients = [int(c) for c in args.journal_clients.split(",")]
    except ValueError:
        parser.error(
            f"--journal-clients: not a comma-separated list of counts: {args.journal_clients}"
        )
    reference = []
    if not args.skip_reference and "journal" in parts:
        reference = ["--reference", reference_python(args.reference_venv)]
    journals = {
        count: run(
            [
                "benchmarks.journal_throughput",
                "--messages",
                str(args.journal_messages),
                "--origins",
                str(args.journal_messages // 5),
                "--clients",
                str(count),
                *reference,
            ],
            args.runs,
        )
        for count in (clients if "journal" in parts else [])
    }
    workers = (
        run(["benchmarks.workers", "--seconds", "0"], args.runs) if "workers" in parts else None
    )
    sizes = {}
    for size in (int(s) for s in args.sizes.split(",")) if "growth" in parts else ():
        runs = args.runs if size <= 1_000_000 else args.runs_above_1m
        sizes[size] = run(["benchmarks.growth", "--origins", str(size)], runs)

    for count, journal in journals.items():
        print_journal(journal, args.journal_messages, count)
    if workers:
        print(
            f"worker: {fmt(workers.median('noop_visits_per_s'), 'no-op visits/s')} per process"
            f" of 8 threads; created acknowledged {fmt(workers.median('created_ack_ms'), 'ms')},"
            f" unacknowledged {workers.median('created_noack_ms') or 0:.3f} ms"
            f" (load {workers.load()})"
        )
    if sizes:
        print_growth(sizes)


if __name__ == "__main__":
    main()
