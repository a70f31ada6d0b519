"""Scheduling policy configuration and the candidates of query policies."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.policies import check_policies, default_policies

#: The one policy that reads origin_visit_stats_oldest_scheduled.
OLDEST_SCHEDULED = "oldest_scheduled_first"

#: Candidates fetched per slot: some of them may be resting or in flight.
OVERFETCH = 3
#: Pages of candidates oldest_scheduled_first reads in one step at most: past
#: them, what it could not claim goes to the pools.
MAX_PAGES = 20


def policies_of(conn: DictConnection, visit_type: str) -> dict[str, float]:
    """The configured (policy, weight) of a visit type, or the reference defaults."""
    rows = conn.execute(query("policies_of_visit_type"), {"visit_type": visit_type}).fetchall()
    if not rows:
        return default_policies(visit_type)
    return {str(r["policy"]): float(r["weight"]) for r in rows}


def set_policies(conn: DictConnection, visit_type: str, policies: dict[str, float]) -> None:
    """Replace the policies of a visit type (validated first: nothing is written if bad).

    The index that oldest_scheduled_first reads exists only while a visit type
    uses that policy: it is built, concurrently, before the policy is written,
    and dropped once no visit type uses it. While it exists, stamping a step's
    picks (mark_scheduled) cannot be a HOT update, which halves its rate.
    ``conn`` is in autocommit mode, outside a transaction (a concurrent index
    build cannot run inside one); policy changes are serialised by a lock, so
    that one cannot drop the index another has just built.
    """
    check_policies(policies)
    conn.execute(query("lock_policies"))
    try:
        if OLDEST_SCHEDULED in policies:
            _sync_oldest_scheduled_index(conn, wanted=True)
        with conn.transaction():
            conn.execute(query("delete_policies"), {"visit_type": visit_type})
            for policy, weight in policies.items():
                conn.execute(
                    query("insert_policy"),
                    {"visit_type": visit_type, "policy": policy, "weight": weight},
                )
        if not oldest_scheduled_index_wanted(conn):
            _sync_oldest_scheduled_index(conn, wanted=False)
    finally:
        conn.execute(query("unlock_policies"))


def oldest_scheduled_index_wanted(conn: DictConnection) -> bool:
    """Whether some visit type uses oldest_scheduled_first, the index's one reader."""
    row = conn.execute(query("oldest_scheduled_index_wanted")).fetchone()
    return bool(row and row["wanted"])


def oldest_scheduled_index_ready(conn: DictConnection) -> bool:
    """Whether the index of oldest_scheduled_first exists and serves queries."""
    row = conn.execute(query("oldest_scheduled_index_valid")).fetchone()
    return bool(row and row["valid"])


def _sync_oldest_scheduled_index(conn: DictConnection, *, wanted: bool) -> None:
    """Build or drop the index; one left invalid by an interrupted build is rebuilt."""
    state = conn.execute(query("oldest_scheduled_index_valid")).fetchone()
    if state is not None and not (wanted and state["valid"]):
        conn.execute(query("drop_oldest_scheduled_index"))
        state = None
    if wanted and state is None:
        conn.execute(query("create_oldest_scheduled_index"))
        conn.execute(query("comment_oldest_scheduled_index"))


def candidates(
    conn: DictConnection,
    policy: str,
    visit_type: str,
    count: int,
    rested_before: datetime,
    lost_before: datetime,
) -> Iterator[list[int]]:
    """Pages of origin ids ranked by a query policy, best first, ``count * OVERFETCH``
    a page (some may be resting or in flight); the caller reads pages until it
    has claimed ``count``. stop_after_success leaves resting origins out: one
    page. oldest_scheduled_first cannot (its rests depend on each origin's
    failures and rate): origins resting after failed or not_found visits lead
    its order for as long as they rest, so it goes on past them, ``MAX_PAGES``
    pages at most.

    ``rested_before``: origins visited later are still cooling down;
    ``lost_before``: origins scheduled earlier without a result count as lost.
    """
    params: dict[str, Any] = {
        "visit_type": visit_type,
        "limit": count * OVERFETCH,
        "rested_before": rested_before,
        "lost_before": lost_before,
        "after_scheduled": None,
        "after_id": None,
    }
    for _ in range(MAX_PAGES if policy == OLDEST_SCHEDULED else 1):
        rows = conn.execute(query(f"candidates_{policy}"), params).fetchall()
        yield [int(r["id"]) for r in rows]
        if len(rows) < params["limit"]:
            return
        params["after_scheduled"] = rows[-1].get("last_scheduled")
        params["after_id"] = rows[-1]["id"]


def listers_with_first_visits_due(conn: DictConnection) -> list[dict[str, Any]]:
    """Listers with a first-visits queue and origins not scheduled since their last listing."""
    return conn.execute(query("listers_with_first_visits_due")).fetchall()


def first_visit_candidates(
    conn: DictConnection, lister: dict[str, Any], visit_type: str, count: int
) -> list[int]:
    """The lister's origins due a first visit after its last listing, best first."""
    rows = conn.execute(
        query("candidates_first_visits_after_listing"),
        {
            "lister_id": lister["id"],
            "visit_type": visit_type,
            "listed_at": lister["last_listing_finished_at"],
            "limit": count * OVERFETCH,
        },
    )
    return [int(r["id"]) for r in rows]


def first_visits_done(conn: DictConnection, lister_id: Any, now: datetime) -> None:
    """Note that every first visit of the lister's last listing was scheduled."""
    conn.execute(query("first_visits_done"), {"lister_id": lister_id, "now": now})
