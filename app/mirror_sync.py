"""Keeping the Redis mirror equal to what PostgreSQL says (DESIGN invariant 1)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from app.context import Context
from app.db.connection import DictConnection
from app.db.listings import mirror_row
from app.db.queries import query
from app.domain.placement import Placement, place


def expected_placements(
    conn: DictConnection, ctx: Context, visit_type: str, now: datetime
) -> Iterator[Placement]:
    """Where Postgres says every origin of ``visit_type`` belongs at ``now``."""
    with conn.cursor(name="mirror_rows") as cursor:
        cursor.itersize = 20000
        cursor.execute(query("mirror_rows_for_visit_type"), {"visit_type": visit_type})
        for row in cursor:
            yield place(mirror_row(row), now, ctx.cooldowns)


def rebuild(conn: DictConnection, ctx: Context, visit_type: str, now: datetime) -> int:
    """Rebuild the mirror of ``visit_type`` from Postgres; return how many origins it holds."""
    with conn.transaction():
        return ctx.mirror.rebuild(visit_type, expected_placements(conn, ctx, visit_type, now))


def ensure_built(conn: DictConnection, ctx: Context, visit_type: str, now: datetime) -> bool:
    """Rebuild the mirror if it is missing (e.g. Redis restarted empty); True if it was."""
    if ctx.mirror.is_built(visit_type):
        return False
    rebuild(conn, ctx, visit_type, now)
    return True


@dataclass(frozen=True)
class Difference:
    """One origin that Redis holds elsewhere than Postgres says."""

    origin_id: int
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"origin {self.origin_id}: expected {self.expected}, mirror has {self.actual}"


def check(conn: DictConnection, ctx: Context, visit_type: str, now: datetime) -> list[Difference]:
    """Compare the mirror of ``visit_type`` with Postgres; return the differences.

    Places are compared exactly; pool scores (next visit targets) too. Origins
    that moved between cooling and pool only because time passed are not a
    difference: cooling origins become eligible at the next pop.
    """
    actual = ctx.mirror.contents(visit_type)
    differences: list[Difference] = []
    with conn.transaction():
        for p in expected_placements(conn, ctx, visit_type, now):
            if p.where == "absent":
                continue
            found = actual.pop(p.id, None)
            if found is None:
                differences.append(Difference(p.id, p.where, "nothing"))
                continue
            where, score = found
            cooled_early = where == "cooling" and p.where == "pool"
            if where != p.where and not cooled_early:
                differences.append(Difference(p.id, p.where, where))
            elif where == "pool" and abs(score - p.score) > 1e-3:
                differences.append(Difference(p.id, f"pool@{p.score}", f"pool@{score}"))
    differences.extend(Difference(i, "absent", w) for i, (w, _) in actual.items())
    return differences
