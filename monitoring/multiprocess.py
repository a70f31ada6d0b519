"""Metrics of several processes served as one: prometheus_client's multiprocess
mode, shared by the Dramatiq pools (``monitoring.dramatiq_metrics``) and the
journal's client processes (``revisit journal --processes N``).

Each process writes its values into files of one directory
(``PROMETHEUS_MULTIPROC_DIR``) and one exporter sums them: counters and
histograms over the processes, live or dead; a gauge as its
``multiprocess_mode`` says (``livesum``: over the live processes;
``livemostrecent``: the value set last by any live process).

A labelled series cannot be removed in this mode (its value stays in the
process's file), so ``forget`` hides it with a later NaN, a tombstone that
``OwnedFiles`` drops.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def in_multiprocess_mode() -> bool:
    """Whether this process writes its metrics into a multiprocess directory."""
    return MULTIPROC_ENV in os.environ


def fresh_directory(directory: Path) -> Path:
    """``directory``, created, without a previous run's files (a dead process's
    counters would be added to this run's)."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)
    return directory


def mark_dead(pid: int, directory: Path) -> None:
    """Drop the live gauges of a process that exited (its counters stay: they
    are part of the totals)."""
    mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]


def forget(gauge: Gauge, *labelvalues: str) -> None:
    """Stop serving one labelled series of ``gauge`` (say, a partition that was
    revoked): removed, or in multiprocess mode hidden by a NaN tombstone
    (the gauge's mode must be ``livemostrecent``, see the module's docstring)."""
    if in_multiprocess_mode():
        gauge.labels(*labelvalues).set(math.nan)
        return
    with contextlib.suppress(KeyError):
        gauge.remove(*labelvalues)


class OwnedFiles(Collector):
    """The multiprocess files of ``directory``, only the families of ``owned``
    (and those whose name starts with one of ``prefixes``): a directory holds
    a file for every unlabelled metric any imported module defines, which
    would otherwise be served at zero."""

    def __init__(
        self, directory: str | Path, owned: Iterable[Collector], prefixes: tuple[str, ...] = ()
    ) -> None:
        self.directory = str(directory)
        self.names = {family.name for metric in owned for family in metric.collect()}
        self.prefixes = prefixes

    def collect(self) -> Iterable[Metric]:
        """The owned families, combined over the processes that wrote them, without
        the tombstones of forgotten gauge series."""
        files = MultiProcessCollector(None, path=self.directory)  # type: ignore[no-untyped-call]
        for family in files.collect():  # type: ignore[no-untyped-call]
            if family.name in self.names or family.name.startswith(self.prefixes):
                if family.type == "gauge":
                    family.samples = [s for s in family.samples if not math.isnan(s.value)]
                yield family
