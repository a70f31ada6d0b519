"""Keeping the Redis mirror equal to what PostgreSQL says (DESIGN invariant 1)."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime

from msgspec import structs

from app.db.connection import DictConnection
from app.db.mirror import mirror_row_batches, mirror_rows_of_ids, unstarted_ids, urls_of
from app.domain.placement import MirrorRow, Placement, epoch_s, place
from app.services.context import Context
from queues.errors import RedisError
from queues.mirror import returns_to

#: After a Redis wipe, a visit sent but not started (no 'created' status) is sent
#: again after this long instead of the scheduled cooldown.
LOST_VISIT_GRACE_S = 600.0
#: Origins placed during a rebuild's bulk phase read again per query.
REREAD_IDS = 20_000


def expected_placements(
    conn: DictConnection, ctx: Context, visit_type: str, now: datetime
) -> Iterator[Placement]:
    """Where Postgres says every origin of ``visit_type`` belongs at ``now``."""
    cooldowns = ctx.cooldowns
    for rows in mirror_row_batches(conn, visit_type):
        for row in rows:
            yield place(MirrorRow(*row), now, cooldowns)


def rebuild(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    now: datetime,
    *,
    redis_lost: bool = False,
) -> int:
    """Rebuild the mirror of ``visit_type`` from Postgres; return how many origins it holds.

    The origins are read in one transaction, begun once the rebuild is marked
    in progress, and written to staging keys; the origins placed meanwhile
    are read again, and one swap makes the new mirror live
    (``queues.mirror.Mirror.begin_rebuild``). Its marker, and the caller's
    lease, are renewed throughout (``Mirror.renewing``).

    With ``redis_lost`` (the mirror vanished, so did the Dramatiq messages in
    the same Redis), visits sent but not started are sent again after
    ``LOST_VISIT_GRACE_S`` instead of the scheduled cooldown (see
    ``requeue_unstarted``).
    """
    # A live key of the wrong type (a hand-made mistake) would fail the swap.
    ctx.mirror.remove_corruptions(visit_type, ctx.mirror.corruptions(visit_type, members=False))
    token = ctx.mirror.begin_rebuild(visit_type)
    try:
        with ctx.mirror.renewing(visit_type):
            with conn.transaction():
                placements = expected_placements(conn, ctx, visit_type, now)
                if redis_lost:
                    placements = requeue_unstarted(
                        ctx, placements, unstarted_ids(conn, visit_type), now
                    )
                ctx.mirror.stage(visit_type, placements)
            # Origins placed while the bulk was written may hold a newer place than
            # the one staged: read them again, now that places reach the staging keys.
            touched = sorted(ctx.mirror.end_bulk(visit_type, token))
            unstarted = unstarted_ids(conn, visit_type) if redis_lost and touched else None
            for start in range(0, len(touched), REREAD_IDS):
                with conn.transaction():
                    ids = touched[start : start + REREAD_IDS]
                    placements = placements_of(conn, ctx, visit_type, ids, now)
                    if unstarted is not None:
                        placements = requeue_unstarted(ctx, placements, unstarted, now)
                    ctx.mirror.place_staged(visit_type, placements)
            return ctx.mirror.finish_rebuild(visit_type, token)
    except BaseException:
        # Release the marker now: a retry (the scheduler's next step) would
        # otherwise wait REBUILD_MARKER_TTL_S for it to lapse.
        with contextlib.suppress(RedisError):
            ctx.mirror.abort_rebuild(visit_type, token)
        raise


def placements_of(
    conn: DictConnection, ctx: Context, visit_type: str, ids: Iterable[int], now: datetime
) -> Iterator[Placement]:
    """Where Postgres says the origins ``ids`` of ``visit_type`` belong at ``now``;
    absent for an id it no longer has."""
    wanted = sorted(ids)
    rows = mirror_rows_of_ids(conn, visit_type, wanted)
    found = {r.id for r in rows}
    for r in rows:
        yield place(r, now, ctx.cooldowns)
    for i in wanted:
        if i not in found:
            yield Placement(i, "absent", 0.0, "never_visited", 0.0)


def requeue_unstarted(
    ctx: Context, placements: Iterator[Placement], unstarted: set[int], now: datetime
) -> Iterator[Placement]:
    """Placements where the in-flight origins whose visit never started (no
    ``created`` status since they were sent) return after ``LOST_VISIT_GRACE_S``.

    Their messages were lost with Redis, so waiting the scheduled cooldown
    (7 days by default) would leave them unvisited that long. A visit that
    started will report its result. The grace covers a visit that started
    but whose ``created`` status the journal has not applied yet: set it
    above the journal's lag, or that origin may be visited twice at once.
    """
    cooldown_s = ctx.cooldowns.scheduled.total_seconds()
    back_s = epoch_s(now) + LOST_VISIT_GRACE_S - cooldown_s
    for p in placements:
        if p.where == "inflight" and p.id in unstarted and p.score > back_s:
            p = structs.replace(p, score=back_s)
        yield p


def return_unsent(
    conn: DictConnection, ctx: Context, visit_type: str, held: set[int], now: datetime
) -> int:
    """Put back the origins in flight whose message was lost before any worker
    took it; return how many.

    Of those the mirror has had in flight for at least ``LOST_VISIT_GRACE_S``
    (and not returned early already) and for which the broker holds no message
    (``held``: the origins of every message of the visit type's queues):

    - those whose send PostgreSQL never recorded (a scheduler died between its
      pop and its stamp) go where PostgreSQL says, back to their pool;
    - those sent whose visit never started (no ``created`` status: a scheduler
      died before its enqueue, or a broker restarted empty lost the message)
      return after the grace, as after a Redis wipe (``requeue_unstarted``),
      instead of the scheduled cooldown.

    A visit that started reports its result; it is left alone.
    """
    now_s = epoch_s(now)
    after_s = now_s - ctx.cooldowns.scheduled.total_seconds() + LOST_VISIT_GRACE_S
    sent = ctx.mirror.sent_between(visit_type, after_s, now_s - LOST_VISIT_GRACE_S)
    lost = sorted(i for i in sent if i not in held)
    if not lost:
        return 0
    unstarted = unstarted_ids(conn, visit_type, lost)
    stranded = [
        p
        for p in placements_of(conn, ctx, visit_type, lost, now)
        if p.id in unstarted or p.where != "inflight"
    ]
    ctx.mirror.place(visit_type, list(requeue_unstarted(ctx, iter(stranded), unstarted, now)))
    return len(stranded)


def place_rows(
    ctx: Context,
    rows: Iterable[MirrorRow],
    now: datetime,
    *,
    new: bool = False,
    keep_inflight: bool = False,
) -> int:
    """Place in the mirror, at ``now``, the origins whose PostgreSQL rows were just
    written (listings, the journal, the scheduler's marks, operators, re-planning);
    return how many moved. Each row's version decides against a concurrent writer.

    ``new``: rows just inserted, which cannot be in the mirror yet (plain writes,
    ``Mirror.add_new``). ``keep_inflight``: leave alone origins Redis has in
    flight, for writers that cannot know of a pop still being recorded.
    """
    by_type: dict[str, list[Placement]] = defaultdict(list)
    for row in rows:
        by_type[row.visit_type].append(place(row, now, ctx.cooldowns))
    if new:
        return sum(ctx.mirror.add_new(vt, placements) for vt, placements in by_type.items())
    return sum(
        ctx.mirror.place(vt, placements, keep_inflight=keep_inflight)
        for vt, placements in by_type.items()
    )


def ensure_built(conn: DictConnection, ctx: Context, visit_type: str, now: datetime) -> bool:
    """Rebuild the mirror if it is missing (e.g. Redis restarted empty); True if it was."""
    if ctx.mirror.is_built(visit_type):
        return False
    rebuild(conn, ctx, visit_type, now, redis_lost=True)
    return True


@dataclass(frozen=True)
class Difference:
    """One origin that Redis holds elsewhere than Postgres says (``url`` once resolved)."""

    origin_id: int
    expected: str
    actual: str
    url: str = ""

    def __str__(self) -> str:
        who = self.url or f"origin {self.origin_id}"
        return f"{who} (id {self.origin_id}): expected {self.expected}, mirror has {self.actual}"


def _compare(
    p: Placement,
    found: list[tuple[str, float]],
    parked: dict[int, tuple[str, float] | None],
    early_return_s: float,
    lost_before_s: float,
) -> Difference | None:
    """How the mirror's place of one origin differs from where Postgres puts it.

    After a Redis wipe, ``requeue_unstarted`` returns lost visits early: an
    in-flight score up to ``early_return_s`` earlier than Postgres says is
    right, and so is the origin's pool if it was sent before ``lost_before_s``
    (now minus the grace).
    """
    expected = p.pool if p.where == "pool" else p.where
    if p.where == "inflight" and p.score <= lost_before_s and found == [(p.pool, p.pool_score)]:
        return None
    if not found:
        return Difference(p.id, expected, "nothing")
    if len(found) > 1:
        return Difference(p.id, expected, " and ".join(place for place, _ in found))
    [(place, score)] = found
    if place in ("cooling", "inflight") and p.where == "pool":
        # Its cooldown ended in Postgres: not a difference if it returns right.
        if parked.get(p.id) != returns_to(p):
            return Difference(p.id, f"back to {returns_to(p)}", f"back to {parked.get(p.id)}")
        return None
    if place != expected:
        return Difference(p.id, expected, place)
    if abs(score - p.score) > 1e-3 and not (
        place == "inflight" and 0 < p.score - score <= early_return_s + 1e-3
    ):
        return Difference(p.id, f"{expected}@{p.score}", f"{place}@{score}")
    if p.where == "cooling" and parked.get(p.id) != returns_to(p):
        return Difference(p.id, f"back to {returns_to(p)}", f"back to {parked.get(p.id)}")
    return None


def check(conn: DictConnection, ctx: Context, visit_type: str, now: datetime) -> list[Difference]:
    """Compare the mirror of ``visit_type`` with Postgres; return the differences by URL.

    The mirror is read atomically (one MULTI/EXEC), Postgres in one
    transaction. Places and scores are compared exactly, and for resting
    origins where they return to. An origin still cooling or in flight in
    Redis whose cooldown has ended is not a difference if it will return to
    the right pool: the next pop moves it there. An origin found in two places
    is one difference naming both.
    """
    actual, parked = ctx.mirror.snapshot(visit_type)
    early_return_s = max(0.0, ctx.cooldowns.scheduled.total_seconds() - LOST_VISIT_GRACE_S)
    lost_before_s = epoch_s(now) - LOST_VISIT_GRACE_S
    differences: list[Difference] = []
    with conn.transaction():
        for p in expected_placements(conn, ctx, visit_type, now):
            found = actual.pop(p.id, [])
            if p.where == "absent":
                if found:
                    differences.append(Difference(p.id, "absent", _names(found)))
                continue
            difference = _compare(p, found, parked, early_return_s, lost_before_s)
            if difference is not None:
                differences.append(difference)
        differences.extend(Difference(i, "absent", _names(f)) for i, f in actual.items())
        return _with_urls(conn, differences)


def _names(found: list[tuple[str, float]]) -> str:
    return " and ".join(place for place, _ in found)


def _with_urls(conn: DictConnection, differences: list[Difference]) -> list[Difference]:
    ids = sorted({d.origin_id for d in differences})
    if not ids:
        return differences
    urls = urls_of(conn, ids)
    return [replace(d, url=urls.get(d.origin_id, "")) for d in differences]


def check_settled(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    clock: Callable[[], datetime],
    settle_s: float = 1.0,
) -> list[Difference]:
    """The differences that persist: checked twice, ``settle_s`` apart, keeping only
    origins different both times. A running system moves origins between the
    two reads (Redis, then Postgres) of one check; a real difference stays."""
    first = check(conn, ctx, visit_type, clock())
    if not first:
        return []
    time.sleep(settle_s)
    suspects = {d.origin_id for d in first}
    return [d for d in check(conn, ctx, visit_type, clock()) if d.origin_id in suspects]


def repair(
    conn: DictConnection,
    ctx: Context,
    visit_type: str,
    differences: list[Difference],
    now: datetime,
) -> int:
    """Put the origins of ``differences`` where Postgres says; return how many moved.

    Only those origins move (the rest of the mirror and the Dramatiq queues
    are left alone, unlike a rebuild). Give it ``check_settled``'s findings,
    so no origin that a running process is moving gets moved back.
    """
    ids = {d.origin_id for d in differences}
    if not ids:
        return 0
    placements = list(placements_of(conn, ctx, visit_type, ids, now))
    moved = ctx.mirror.place(visit_type, placements, repair=True)
    # An origin found nowhere (or twice) left the pools' sizes wrong.
    ctx.mirror.recount(visit_type)
    return moved
