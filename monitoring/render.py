"""Draws the dashboard's panels from a Prometheus server to a PNG, for where
Grafana is not at hand (``monitoring/README.md`` shows one drawn from a test run).

Needs matplotlib (the ``dev`` extra).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from monitoring.dashboard import panels
from monitoring.prometheus_api import query_range, with_rate_window

_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
COLUMNS = 4


def legend(template: str, labels: dict[str, str]) -> str:
    """A Grafana legend format filled with a series' labels."""
    return _LABEL.sub(lambda m: labels.get(m.group(1), ""), template).strip()


def render_png(
    base_url: str, path: Path, start: float, end: float, step_s: float, rate_window: str
) -> None:
    """Query every panel over [start, end] and draw them, one subplot each, to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = panels()
    rows = (len(shown) + COLUMNS - 1) // COLUMNS
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(5.2 * COLUMNS, 3.3 * rows), squeeze=False)
    for ax in axes.flat[len(shown) :]:
        ax.axis("off")
    for ax, panel in zip(axes.flat, shown, strict=False):
        for target in panel.targets:
            expr = with_rate_window(target.expr, rate_window)
            for series in query_range(base_url, expr, start, end, step_s):
                xs = [(float(t) - start) for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, label=legend(target.legend, series["metric"]), linewidth=1.2)
        ax.set_title(f"{panel.title}  [{panel.row}]", fontsize=9)
        ax.set_xlabel("seconds", fontsize=7)
        ax.set_ylabel(panel.unit, fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=6, loc="best")
    when = datetime.fromtimestamp(end, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    fig.suptitle(f"revisit dashboard, drawn from the Prometheus of a run ({when})", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=72)
    plt.close(fig)
