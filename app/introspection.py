"""Answers for operators: what comes next, and where one origin stands."""

from __future__ import annotations

from typing import Any

from app.context import Context
from app.db.connection import DictConnection
from app.db.queries import query
from app.db.scheduling import origins_by_id
from app.domain.placement import POOLS


def peek_next(
    conn: DictConnection, ctx: Context, visit_type: str, n: int
) -> list[tuple[str, str, float]]:
    """The first ``n`` origins of each pool (read-only): url, pool, score."""
    found: list[tuple[int, str, float]] = []
    for pool in POOLS:
        key = ctx.mirror.keys(visit_type).pool(pool)
        members: list[tuple[bytes, float]] = ctx.redis.zrange(key, 0, n - 1, withscores=True)  # type: ignore[assignment]
        found += [(int(m), pool, float(score)) for m, score in members]
    known = origins_by_id(conn, [i for i, _, _ in found])
    return [
        (str(known[i]["url"]) if i in known else f"<id {i}>", pool, score)
        for i, pool, score in found
    ]


def describe_origin(
    conn: DictConnection, ctx: Context, url: str, visit_type: str | None
) -> list[dict[str, Any]]:
    """Stats, listing and mirror place of ``url`` (one report per visit type)."""
    reports = []
    for row in conn.execute(query("describe_origin"), {"url": url, "visit_type": visit_type}):
        report = dict(row)
        location = ctx.mirror.locate(str(row["visit_type"]), int(row["id"]))
        report["mirror_place"] = location.pool or location.where
        report["mirror_rank"] = location.rank
        report["mirror_score"] = location.score
        reports.append(report)
    return reports
