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
from queues.mirror import returns_to


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

    Places and scores are compared exactly, and for resting origins where they
    return to. An origin still cooling or in flight in Redis whose cooldown
    has ended is not a difference if it will return to the right pool: the
    next pop moves it there.
    """
    actual = ctx.mirror.contents(visit_type)
    resting = {i for i, (place, _) in actual.items() if place in ("inflight", "cooling")}
    parked = ctx.mirror.parked(visit_type)
    differences: list[Difference] = []
    with conn.transaction():
        for p in expected_placements(conn, ctx, visit_type, now):
            if p.where == "absent":
                continue
            expected = p.pool if p.where == "pool" else p.where
            found = actual.pop(p.id, None)
            if found is None:
                differences.append(Difference(p.id, expected, "nothing"))
                continue
            place, score = found
            if place in ("cooling", "inflight") and p.where == "pool":
                expected_back = returns_to(p)
                if parked.get(p.id) != expected_back:
                    differences.append(
                        Difference(p.id, f"back to {expected_back}", f"back to {parked.get(p.id)}")
                    )
            elif place != expected:
                differences.append(Difference(p.id, expected, place))
            elif abs(score - p.score) > 1e-3:
                differences.append(Difference(p.id, f"{expected}@{p.score}", f"{place}@{score}"))
            elif p.where == "cooling" and parked.get(p.id) != returns_to(p):
                differences.append(
                    Difference(p.id, f"back to {returns_to(p)}", f"back to {parked.get(p.id)}")
                )
    differences.extend(Difference(i, "absent", place) for i, (place, _) in actual.items())
    differences.extend(Difference(i, "not parked", "parked") for i in parked if i not in resting)
    return differences
