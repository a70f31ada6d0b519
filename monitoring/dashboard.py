"""The Grafana dashboard, ``monitoring/grafana/revisit.json``, read as panels.

The JSON file is the one definition: edit it in Grafana and export it, or by
hand. The observability test evaluates every panel's queries on a real
Prometheus, and ``monitoring.render`` draws them without Grafana.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

JSON_PATH = Path(__file__).resolve().parent / "grafana" / "revisit.json"
#: Grafana's rate window variable; tests substitute a window of their own.
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Target:
    """One query of a panel and the legend of its series."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One time-series panel: its row, what it shows in one line, and its queries."""

    row: str
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]


def panels(path: Path = JSON_PATH) -> list[Panel]:
    """The dashboard's time-series panels, in order, each with the row it is under."""
    found, row = [], ""
    for item in json.loads(path.read_text())["panels"]:
        if item["type"] == "row":
            row = item["title"]
            continue
        targets = tuple(Target(t["expr"], t.get("legendFormat", "")) for t in item["targets"])
        unit = item.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        found.append(Panel(row, item["title"], item.get("description", ""), unit, targets))
    return found
