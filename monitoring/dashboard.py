"""The Grafana dashboard, as data: one definition that writes
``monitoring/grafana/revisit.json`` (``python -m monitoring.dashboard``), that
the observability test evaluates on a real Prometheus, and that the picture in
``monitoring/README.md`` is drawn from.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """One time-series panel: what it shows, in one line, and its queries."""

    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]


def _q(quantile: float, metric: str, by: str = "") -> str:
    """A quantile of a histogram, by the given labels."""
    labels = f"le, {by}" if by else "le"
    return f"histogram_quantile({quantile}, sum by ({labels}) (rate({metric}_bucket[{RATE}])))"


def _rate(metric: str, by: str) -> str:
    """The per-second rate of a counter, summed by the given labels."""
    return f"sum by ({by}) (rate({metric}[{RATE}]))"


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Pools and coverage",
        (
            Panel(
                "Origins per pool",
                "Origins in each scheduling pool of seed 000 (the policies' groups), in flight "
                "and cooling, per visit type, from the Redis mirror.",
                "short",
                (
                    Target(
                        "sum by (visit_type, place) (revisit_mirror_origins)",
                        "{{visit_type}} {{place}}",
                    ),
                ),
            ),
            Panel(
                "Origins per pool, policy and lister",
                "Listed origins in each scheduling pool (with the policy that picks from it), "
                "in flight and cooling, per lister and visit type (seed 000).",
                "short",
                (
                    Target(
                        "sum by (lister, visit_type, place, policy) (revisit_origins_by_pool)",
                        "{{lister}} {{visit_type}} {{place}} {{policy}}",
                    ),
                ),
            ),
            Panel(
                "Coverage per lister",
                "Seed 002's scheduler_metrics: origins known, enabled, never visited and with "
                "changes reported since the last visit, per lister and visit type.",
                "short",
                (
                    Target("revisit_origins_known", "{{lister}} {{visit_type}} known"),
                    Target("revisit_origins_enabled", "{{lister}} {{visit_type}} enabled"),
                    Target(
                        "revisit_origins_never_visited", "{{lister}} {{visit_type}} never visited"
                    ),
                    Target(
                        "revisit_origins_with_pending_changes",
                        "{{lister}} {{visit_type}} pending changes",
                    ),
                ),
            ),
            Panel(
                "Active origins per lister",
                "Enabled origins whose forge-reported last update is within the active window.",
                "short",
                (Target("revisit_origins_active", "{{lister}} {{visit_type}}"),),
            ),
            Panel(
                "Never visited past the threshold",
                "Enabled origins listed longer ago than the threshold and still never "
                "successfully visited (alert: RevisitOriginsNeverVisited).",
                "short",
                (Target("revisit_origins_never_visited_overdue", "{{lister}} {{visit_type}}"),),
            ),
        ),
    ),
    (
        "Scheduler",
        (
            Panel(
                "Schedule drift",
                "Real time minus the next visit target reached, per visit type (under "
                "age_optimal, the target of the first planned origin still waiting): growing "
                "means the workers fall behind the schedule (alert: RevisitScheduleDriftGrowing).",
                "s",
                (Target("revisit_schedule_drift_seconds", "{{visit_type}}"),),
            ),
            Panel(
                "Free slots",
                "Free slots of each recurrent visit queue at the last step.",
                "short",
                (Target("revisit_scheduler_free_slots", "{{visit_type}}"),),
            ),
            Panel(
                "Visits scheduled by policy and lane",
                "Visits sent to workers per second, by the policy that picked them and the lane.",
                "ops",
                (
                    Target(
                        f"sum by (policy, lane) (rate(revisit_scheduled_visits_total[{RATE}]))",
                        "{{policy}} ({{lane}})",
                    ),
                ),
            ),
            Panel(
                "Batch size",
                "Mean visits sent per step and queue (steps without free slots count as 0).",
                "short",
                (
                    Target(
                        f"sum by (lane) (rate(revisit_scheduler_batch_size_sum[{RATE}]))"
                        f" / sum by (lane) (rate(revisit_scheduler_batch_size_count[{RATE}]))",
                        "{{lane}}",
                    ),
                ),
            ),
            Panel(
                "Pop and enqueue latency (p90)",
                "90th percentile time to pick a batch (policies, atomic pop, record) and to "
                "enqueue it into Dramatiq.",
                "s",
                (
                    Target(
                        _q(0.9, "revisit_scheduler_pop_seconds", "visit_type"), "pop {{visit_type}}"
                    ),
                    Target(
                        _q(0.9, "revisit_scheduler_enqueue_seconds", "visit_type"),
                        "enqueue {{visit_type}}",
                    ),
                ),
            ),
            Panel(
                "In flight and returned",
                "Origins in flight, and origins returned to their pool per second: after "
                "their cooldown, or lost (no result within scheduled_cooldown).",
                "short",
                (
                    Target(
                        'sum by (visit_type) (revisit_mirror_origins{place="inflight"})',
                        "in flight {{visit_type}}",
                    ),
                    Target(
                        _rate("revisit_returned_origins_total", "visit_type, reason"),
                        "returned {{reason}} {{visit_type}} /s",
                    ),
                ),
            ),
            Panel(
                "Mirror rebuilds",
                "Rebuilds of a missing mirror per second, and how long the last one took; "
                "the visit type is not scheduled meanwhile (alert: RevisitMirrorRebuilt).",
                "short",
                (
                    Target(
                        _rate("revisit_mirror_rebuilds_total", "visit_type"),
                        "rebuilds {{visit_type}} /s",
                    ),
                    Target(
                        "max by (visit_type) (revisit_mirror_rebuild_seconds)",
                        "last rebuild (s) {{visit_type}}",
                    ),
                ),
            ),
            Panel(
                "Queue depth",
                "Messages waiting or running in each visit queue (alert: RevisitQueueStarved).",
                "short",
                (Target("revisit_queue_depth", "{{queue}}"),),
            ),
            Panel(
                "Estimated wait per queue",
                "How long a visit sent now waits until done: queue depth over its drain rate.",
                "s",
                (Target("revisit_queue_estimated_wait_seconds", "{{queue}}"),),
            ),
        ),
    ),
    (
        "Journal",
        (
            Panel(
                "Journal messages by status",
                "origin_visit_status messages applied per second, by status and visit type.",
                "ops",
                (
                    Target(
                        _rate("revisit_journal_messages_total", "status, visit_type"),
                        "{{status}} {{visit_type}}",
                    ),
                ),
            ),
            Panel(
                "Eventful ratio",
                "Share of successful visits that found new content, per visit type.",
                "percentunit",
                (
                    Target(
                        "sum by (visit_type) (rate(revisit_journal_visit_outcomes_total"
                        f'{{outcome="eventful"}}[{RATE}]))'
                        " / sum by (visit_type) (rate(revisit_journal_visit_outcomes_total"
                        f'{{outcome=~"eventful|uneventful"}}[{RATE}]))',
                        "{{visit_type}}",
                    ),
                ),
            ),
            Panel(
                "Journal batch latency",
                "Median and 90th percentile time to apply one batch, commit included.",
                "s",
                (
                    Target(
                        _q(0.5, "revisit_journal_batch_seconds"),
                        "p50",
                    ),
                    Target(
                        _q(0.9, "revisit_journal_batch_seconds"),
                        "p90",
                    ),
                ),
            ),
            Panel(
                "Dead letters by reason",
                "Malformed messages sent to the dead-letter topic, by the field at fault "
                "(alert: RevisitDeadLetters).",
                "short",
                (
                    Target(
                        f"sum by (reason) (increase(revisit_journal_dead_letters_total[{RATE}]))",
                        "{{reason}}",
                    ),
                ),
            ),
            Panel(
                "Consumer lag per partition",
                "Messages between the journal client's position and the high watermark, where "
                "the broker reports it (alert: RevisitJournalLagging).",
                "short",
                (Target("revisit_journal_consumer_lag", "partition {{partition}}"),),
            ),
        ),
    ),
    (
        "Workers",
        (
            Panel(
                "Messages processed per queue",
                "Dramatiq messages done per second by each queue, those that raised, and visits "
                "per second by status (full, partial, failed, not_found).",
                "ops",
                (
                    Target(
                        f"sum by (queue_name) (rate(dramatiq_messages_total[{RATE}]))",
                        "{{queue_name}}",
                    ),
                    # Errors appear only once one happens: show 0 until then.
                    Target(
                        f"sum by (queue_name) (rate(dramatiq_message_errors_total[{RATE}]))"
                        f" or sum by (queue_name) (rate(dramatiq_messages_total[{RATE}])) * 0",
                        "{{queue_name}} errors",
                    ),
                    Target(_rate("revisit_worker_visits_total", "status"), "visits {{status}}"),
                ),
            ),
            Panel(
                "Messages in progress",
                "Messages being processed now by each queue's workers.",
                "short",
                (Target("sum by (queue_name) (dramatiq_messages_inprogress)", "{{queue_name}}"),),
            ),
            Panel(
                "Visit duration by lane (p90)",
                "90th percentile visit duration by visit type and lane.",
                "s",
                (
                    Target(
                        _q(0.9, "revisit_worker_lane_visit_seconds", "visit_type, lane"),
                        "{{visit_type}} {{lane}}",
                    ),
                ),
            ),
        ),
    ),
    (
        "Requests and first visits",
        (
            Panel(
                "Save code now latency",
                "Median and 90th percentile time from a request to its completed visit "
                "(alert: RevisitSaveCodeNowSlow).",
                "s",
                (
                    Target(_q(0.5, "revisit_request_latency_seconds", "kind"), "p50 {{kind}}"),
                    Target(_q(0.9, "revisit_request_latency_seconds", "kind"), "p90 {{kind}}"),
                ),
            ),
            Panel(
                "Time to first visit",
                "Median and 90th percentile time from an origin's first listing to its first "
                "visit.",
                "s",
                (
                    Target(
                        _q(0.5, "revisit_first_visit_wait_seconds", "visit_type"),
                        "p50 {{visit_type}}",
                    ),
                    Target(
                        _q(0.9, "revisit_first_visit_wait_seconds", "visit_type"),
                        "p90 {{visit_type}}",
                    ),
                ),
            ),
            Panel(
                "Coverage refresh cost",
                "Time the scheduler process spends per refresh of scheduler_metrics and the "
                "other periodic figures (p90).",
                "s",
                (
                    Target(
                        _q(0.9, "revisit_coverage_refresh_seconds"),
                        "p90",
                    ),
                ),
            ),
        ),
    ),
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def panels() -> list[Panel]:
    """Every panel, in dashboard order."""
    return [panel for _, row in ROWS for panel in row]


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": t.expr,
                "legendFormat": t.legend,
            }
            for i, t in enumerate(panel.targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana imports it, with a Prometheus datasource variable."""
    items: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for title, row in ROWS:
        items.append(
            {
                "id": panel_id,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        panel_id, y = panel_id + 1, y + 1
        for i, panel in enumerate(row):
            items.append(_panel_json(panel, panel_id, (i % 3) * 8, y + (i // 3) * 8))
            panel_id += 1
        y += ((len(row) + 2) // 3) * 8
    return {
        "title": "revisit",
        "uid": "revisit-overview",
        "description": "How far behind the scheduler is, and whether visits, results and "
        "urgent requests flow (issue 7).",
        "tags": ["revisit"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "regex": "",
                }
            ]
        },
        "panels": items,
    }


def render_json() -> str:
    """The dashboard file's text."""
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    JSON_PATH.write_text(render_json())
    sys.stdout.write(f"wrote {JSON_PATH}\n")
