from pathlib import Path

from app.db.migrate import available
from app.db.queries import INCLUDED, all_queries, parse_blocks, raw_queries
from app.domain.policies import POLICIES

ROOT = Path(__file__).resolve().parents[2]


def test_every_named_query_loads_once() -> None:
    queries = all_queries()
    assert {"mark_scheduled", "upsert_stats", "lock_stats", "upsert_listed_origins"} <= set(queries)
    assert all(body.strip() for body in queries.values())


def test_named_blocks_split_on_name_comments() -> None:
    blocks = parse_blocks("-- name: a\nselect 1\n\n-- name: b\nselect 2\n")
    assert blocks == {"a": "select 1", "b": "select 2"}


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [m.version for m in available()]
    assert versions == list(range(1, len(versions) + 1))


def test_a_block_includes_another_by_name_without_its_comments() -> None:
    queries = all_queries()
    assert "{{" not in "".join(queries.values())
    assert "(st.listed and not st.disabled_for_failures) as enabled" in queries["upsert_stats"]
    assert "-- What decides" not in queries["mirror_rows_for_visit_type"]


def test_every_named_query_is_used_by_the_code() -> None:
    """A query nothing runs is dead: it goes (policies' queries are run by name)."""
    code = "\n".join(
        path.read_text()
        for folder in ("app", "actors", "queues", "monitoring")
        for path in (ROOT / folder).rglob("*.py")
    )
    by_policy = {f"candidates_{policy}" for policy in POLICIES}
    used = {name for name in all_queries() if f'"{name}"' in code or name in by_policy}
    included = {name for body in raw_queries().values() for name in INCLUDED.findall(body)}
    assert set(all_queries()) - used - included == set()
