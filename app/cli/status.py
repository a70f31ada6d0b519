"""``revisit status``: the live view of every visit type (the Flower view of revisit)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.text import Text

from app.cli.common import connected, console, new_table, now, visit_types_of
from app.db.connection import DictConnection
from app.db.metrics import open_requests, schedule_drift
from app.domain.lanes import LANES
from app.domain.queue_names import lane_queue
from app.services.context import Context
from app.services.status import LaneStatus, Snapshot, VisitTypeStatus, pool_total, rates
from queues import dramatiq_queues as dq
from queues.workers import capacities, outcomes

#: The request statuses the live view counts, in its column's order.
REQUEST_COLUMNS = ("blocked", "pending", "scheduled", "running")


def snapshot(conn: DictConnection, ctx: Context, visit_types: list[str], at: datetime) -> Snapshot:
    """Read the state of ``visit_types`` now (``at`` stamps it)."""
    settings = ctx.settings
    queues = [lane_queue(vt, lane) for vt in visit_types for lane in LANES]
    depths = dq.depths(ctx.redis, queues)
    capacity = capacities(ctx.redis, settings.redis_namespace, queues)
    requests = open_requests(conn)
    drift = schedule_drift(conn, at)
    found = []
    warnings = []
    for vt in visit_types:
        lanes = {}
        for lane in LANES:
            queue = lane_queue(vt, lane)
            lanes[lane] = LaneStatus(depths[queue], capacity[queue].threads)
        ended = outcomes(ctx.redis, settings.redis_namespace, vt)
        corrupt = ctx.mirror.corruptions(vt, members=False)
        warnings += [f"{vt}: the mirror holds {c}" for c in corrupt]
        places = {} if corrupt else ctx.mirror.sizes(vt)
        found.append(VisitTypeStatus(vt, places, lanes, ended, requests.get(vt, {}), drift.get(vt)))
    return Snapshot(at, found, warnings)


def _lane(lane: LaneStatus) -> str:
    d = lane.depth
    delayed = f"+{d.delayed}d" if d.delayed else ""
    return f"{d.waiting}+{d.running}{delayed} /{lane.worker_threads}t"


def _drift(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{sign}{seconds / size:.1f}{unit}"
    return f"{sign}{seconds:.0f}s"


def render(current: Snapshot, previous: Snapshot | None) -> Group:
    """The view of ``current``, with rates since ``previous``."""
    lanes = ", ".join(f"{lane} q" for lane in LANES)
    table = new_table(
        "visit type, never visited, lagging, no last update, up to date, in flight, cooling, "
        f"{lanes}, visits/s, failed, requests, drift, dead",
        title=f"revisit status at {current.at.isoformat(timespec='seconds')}",
        caption="queues: waiting+running(+delayed) /worker threads; requests: "
        "blocked/pending/scheduled/running; drift: how far the clock is ahead of the next "
        "visit target",
    )
    before = {s.visit_type: s for s in previous.visit_types} if previous else {}
    seconds = (current.at - previous.at).total_seconds() if previous else 0.0
    for s in current.visit_types:
        rate = rates(before[s.visit_type], s, seconds) if s.visit_type in before else None
        table.add_row(
            s.visit_type,
            *(str(s.places.get(p, 0)) for p in POOL_COLUMNS),
            str(s.places.get("inflight", 0)),
            str(s.places.get("cooling", 0)),
            *(_lane(s.lanes[lane]) for lane in LANES),
            f"{rate.visits_per_s:.2f}" if rate else "-",
            f"{rate.failed_share:.0%}" if rate else "-",
            "/".join(str(s.requests.get(k, 0)) for k in REQUEST_COLUMNS),
            _drift(s.drift_s),
            Text(str(s.dead), style="red" if s.dead else ""),
        )
    waiting = sum(pool_total(s) for s in current.visit_types)
    warnings = [Text(w, style="red") for w in current.warnings]
    return Group(table, Text(f"{waiting} origins waiting in pools", style="dim"), *warnings)


POOL_COLUMNS = ("never_visited", "lagging", "no_last_update", "up_to_date")


def status(
    visit_type: Annotated[str | None, typer.Argument(help="only this visit type")] = None,
    interval: Annotated[float, typer.Option(min=0.2, help="seconds between refreshes")] = 2.0,
    once: Annotated[
        bool, typer.Option("--once", help="print one snapshot and exit (rates need two)")
    ] = False,
) -> None:
    """Live view: per visit type the pools, in flight, cooling, lane queues and
    workers, visits/s, failure rate, open requests, schedule drift, dead letters."""
    with connected() as (conn, ctx):
        types = visit_types_of(conn, visit_type)
        previous = snapshot(conn, ctx, types, now())
        if once:
            console.print(render(previous, None))
            return
        with Live(render(previous, None), console=console, auto_refresh=False) as live:
            try:
                while True:
                    time.sleep(interval)
                    current = snapshot(conn, ctx, types, now())
                    live.update(render(current, previous), refresh=True)
                    previous = current
            except KeyboardInterrupt:
                pass
