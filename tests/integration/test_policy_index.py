"""The index of oldest_scheduled_first exists only while a visit type uses that
policy (migration 17): without it, stamping a step's picks is a HOT update.
The index of stop_after_success serves its order (migration 27)."""

from datetime import UTC, datetime

import psycopg
import pytest

from app.db.connection import DictConnection
from app.db.migrate import available
from app.db.policies import (
    oldest_scheduled_index_ready,
    oldest_scheduled_index_wanted,
    set_policies,
)
from app.db.queries import query
from app.db.scheduling import mark_scheduled
from app.services.context import Context
from tests.integration.helpers import cli, list_origins

NOW = datetime(2026, 11, 1, tzinfo=UTC)
URLS = [f"https://hot.example/{i}" for i in range(50)]
INDEX = "origin_visit_stats_oldest_scheduled"


def hot_updates_of_marking(conn: DictConnection, ids: list[int]) -> tuple[int, int]:
    """Updates and HOT updates of origin_visit_stats by one mark_scheduled."""
    with conn.transaction():
        mark_scheduled(conn, ids, NOW)
        row = conn.execute(
            "select n_tup_upd, n_tup_hot_upd from pg_stat_xact_user_tables"
            " where relname = 'origin_visit_stats'"
        ).fetchone()
    assert row is not None
    return int(row["n_tup_upd"]), int(row["n_tup_hot_upd"])


def plan_of(conn: DictConnection, policy: str = "oldest_scheduled_first") -> str:
    """The plan of a query policy's query when the planner may not scan the table."""
    with conn.transaction():
        conn.execute("set local enable_seqscan = off")
        rows = conn.execute(
            "explain " + query(f"candidates_{policy}"),
            {
                "visit_type": "git",
                "limit": 10,
                "lost_before": NOW,
                "rested_before": NOW,
                "after_scheduled": None,
                "after_id": None,
            },
        ).fetchall()
    return "\n".join(str(r["QUERY PLAN"]) for r in rows)


def test_a_fresh_database_has_no_index_on_last_scheduled(conn: DictConnection) -> None:
    assert not oldest_scheduled_index_wanted(conn)
    assert not oldest_scheduled_index_ready(conn)


def test_marking_origins_scheduled_is_a_hot_update_without_the_index(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    ids = [int(r["id"]) for r in conn.execute("select id from origin_visit_stats")][::10]
    assert hot_updates_of_marking(conn, ids) == (len(ids), len(ids))


def test_setting_oldest_scheduled_first_builds_the_index_its_query_reads(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    ids = [int(r["id"]) for r in conn.execute("select id from origin_visit_stats")][::10]
    assert INDEX not in plan_of(conn)
    set_policies(conn, "git", {"oldest_scheduled_first": 1.0})
    assert oldest_scheduled_index_ready(conn)
    assert INDEX in plan_of(conn)
    assert hot_updates_of_marking(conn, ids) == (len(ids), 0)


def test_oldest_scheduled_first_ranks_origins_scheduled_together_by_id(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    set_policies(conn, "git", {"oldest_scheduled_first": 1.0})
    ids = sorted(int(r["id"]) for r in conn.execute("select id from origin_visit_stats"))
    # stamped together, the later ids first: their rows now lie before the earlier ids'
    mark_scheduled(conn, ids[25:], NOW)
    mark_scheduled(conn, ids[:25], NOW)
    ranked = []
    for scan in ("on", "off"):  # a scan of the table, then the index
        with conn.transaction():
            conn.execute(f"set local enable_seqscan = {scan}")
            rows = conn.execute(
                query("candidates_oldest_scheduled_first"),
                {"visit_type": "git", "limit": 5, "after_scheduled": None, "after_id": None},
            ).fetchall()
        ranked.append([int(r["id"]) for r in rows])
    assert ranked == [ids[:5], ids[:5]]


def test_the_index_goes_when_the_last_visit_type_leaves_the_policy(
    conn: DictConnection,
) -> None:
    set_policies(conn, "git", {"oldest_scheduled_first": 1.0})
    set_policies(conn, "hg", {"oldest_scheduled_first": 1.0})
    set_policies(conn, "git", {"age_optimal": 1.0})
    assert oldest_scheduled_index_ready(conn)
    set_policies(conn, "hg", {"already_visited_order_by_lag": 1.0})
    assert not oldest_scheduled_index_wanted(conn)
    assert not oldest_scheduled_index_ready(conn)


def test_an_index_left_invalid_by_an_interrupted_build_is_built_again(
    conn: DictConnection,
) -> None:
    conn.execute(
        f"create index {INDEX} on origin_visit_stats (visit_type, last_scheduled nulls first)"
        " where listed and not disabled_for_failures"
    )
    conn.execute(
        "update pg_index set indisvalid = false where indexrelid = to_regclass(%s)", (INDEX,)
    )
    assert not oldest_scheduled_index_ready(conn)
    set_policies(conn, "git", {"oldest_scheduled_first": 1.0})
    assert oldest_scheduled_index_ready(conn)


def test_the_policy_command_builds_and_drops_the_index(conn: DictConnection) -> None:
    built = cli("policy", "set", "git", "oldest_scheduled_first=1")
    assert built.returncode == 0, built.stderr
    assert "building the index" in built.stdout
    assert oldest_scheduled_index_ready(conn)
    again = cli("policy", "set", "git", "oldest_scheduled_first=2")
    assert "building" not in again.stdout  # already there
    dropped = cli("policy", "set", "git", "age_optimal=1")
    assert dropped.returncode == 0, dropped.stderr
    assert "dropped the index" in dropped.stdout
    assert not oldest_scheduled_index_ready(conn)


def test_policy_show_warns_when_the_index_its_policy_reads_is_missing(
    conn: DictConnection,
) -> None:
    assert cli("policy", "set", "git", "oldest_scheduled_first=1").returncode == 0
    assert "warning" not in cli("policy", "show").stdout
    conn.execute(f"drop index {INDEX}")
    shown = cli("policy", "show")
    assert shown.returncode == 0, shown.stderr
    assert "index that oldest_scheduled_first reads is missing" in " ".join(shown.stdout.split())
    assert cli("policy", "set", "git", "oldest_scheduled_first=1").returncode == 0
    assert oldest_scheduled_index_ready(conn)


@pytest.mark.parametrize("in_use", [True, False])
def test_the_migration_keeps_the_index_only_where_the_policy_is_in_use(
    database_url: str, in_use: bool
) -> None:
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            f"create index {INDEX} on origin_visit_stats (visit_type, last_scheduled nulls first)"
            " where listed and not disabled_for_failures"
        )
        if in_use:
            admin.execute(
                "insert into scheduling_policies values ('git', 'oldest_scheduled_first', 1)"
            )
    (migration,) = [m for m in available() if m.version == 17]
    with psycopg.connect(database_url) as check:
        check.execute(migration.sql.encode())
        found = check.execute("select to_regclass(%s) is not null", (INDEX,)).fetchone()
    assert found == (in_use,)


def test_stop_after_success_reads_its_candidates_in_order_from_its_index(
    conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, URLS, now=NOW)
    plan = plan_of(conn, "stop_after_success")
    assert "origin_visit_stats_never_succeeded" in plan
    assert "Sort" not in plan
