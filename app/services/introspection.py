"""Answers for operators: where one origin stands, and roughly when it will be visited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from app.db.connection import DictConnection
from app.db.origins import describe
from app.domain.allocation import counts_from_latest_change
from app.domain.latency import wait_s
from app.loaders.base import publishes_statuses
from app.services.context import Context
from queues.mirror import Location


def describe_origin(
    conn: DictConnection, ctx: Context, url: str, visit_type: str | None
) -> list[dict[str, Any]]:
    """Stats, listing and mirror place of ``url`` (one report per visit type)."""
    reports = []
    for row in describe(conn, url, visit_type):
        report = dict(row)
        snapshot, loader = report.get("last_snapshot"), report.get("loader")
        if snapshot and loader and not publishes_statuses(loader):
            # The archive's loaders' snapshots are the archive's (revisit's git
            # loader's are a hash of the refs, no SWHID).
            report["last_snapshot_swhid"] = f"swh:1:snp:{snapshot}"
        location = ctx.mirror.locate(str(row["visit_type"]), int(row["id"]))
        delay = report.get("reported_change_delay_s")
        if isinstance(delay, float) and counts_from_latest_change(delay):
            # stored negated: τ after the latest reported change, not the first missed one
            report["reported_change_delay_s"] = f"{-delay} (quiet-first)"
        report["mirror_place"] = location.pool or location.where
        report["mirror_rank"] = location.rank
        report["mirror_score"] = location.score
        report["next_visit_eta"] = eta(ctx, str(row["visit_type"]), location, datetime.now(tz=UTC))
        reports.append(report)
    return reports


def eta(ctx: Context, visit_type: str, location: Location, now: datetime) -> str:
    """Roughly when the origin will be visited: its rank over its pool's recent pick rate."""
    if location.where == "inflight":
        return "now (in flight)"
    if location.where == "cooling" and location.score is not None:
        rested = datetime.fromtimestamp(location.score, tz=UTC)
        return f"not before {rested.isoformat(timespec='seconds')}"
    if location.where != "pool" or location.pool is None or location.rank is None:
        return "never (not scheduled)"
    rate = ctx.mirror.pick_rate(visit_type, location.pool)
    if rate <= 0:
        return "unknown (no recent picks from its pool)"
    when = now + timedelta(seconds=wait_s(location.rank + 1, rate) or 0.0)
    return f"about {when.isoformat(timespec='seconds')} (rank {location.rank}, {rate:.2f}/s)"
