"""Answers for operators: what comes next, and where one origin stands."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.context import Context
from app.db.connection import DictConnection
from app.db.queries import query
from app.db.scheduling import origins_by_id


def peek_next(
    conn: DictConnection, ctx: Context, visit_type: str, n: int
) -> list[tuple[str, str, datetime]]:
    """The next ``n`` origins the scheduler would pick (read-only): url, pool, target."""
    pool = ctx.mirror.keys(visit_type).pool()
    members: list[tuple[bytes, float]] = ctx.redis.zrange(pool, 0, n - 1, withscores=True)  # type: ignore[assignment]
    ids = [int(m) for m, _ in members]
    known = origins_by_id(conn, ids)
    return [
        (
            str(known[int(m)]["url"]) if int(m) in known else f"<id {int(m)}>",
            "next_visit",
            datetime.fromtimestamp(score, tz=UTC),
        )
        for m, score in members
    ]


def describe_origin(
    conn: DictConnection, ctx: Context, url: str, visit_type: str | None
) -> list[dict[str, Any]]:
    """Stats, listing and mirror place of ``url`` (one report per visit type)."""
    reports = []
    for row in conn.execute(query("describe_origin"), {"url": url, "visit_type": visit_type}):
        report = dict(row)
        location = ctx.mirror.locate(str(row["visit_type"]), int(row["id"]))  # type: ignore[call-overload]
        report["mirror_place"] = location.where
        report["mirror_rank"] = location.rank
        if location.score is not None:
            report["mirror_score"] = datetime.fromtimestamp(location.score, tz=UTC).isoformat()
        reports.append(report)
    return reports
