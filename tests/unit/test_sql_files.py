from app.db.migrate import available
from app.db.queries import all_queries, parse_blocks


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
