import psycopg

from app.db.migrate import available, migrate


def test_migrating_twice_applies_nothing_the_second_time(database_url: str) -> None:
    assert migrate(database_url) == []
    with psycopg.connect(database_url) as conn:
        version = conn.execute("select max(version) from schema_version").fetchone()
    assert version == (len(available()),)


def test_every_column_of_every_table_has_a_comment(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        missing = conn.execute(
            """
            select c.table_name || '.' || c.column_name
            from information_schema.columns c
            join pg_class t on t.relname = c.table_name
            join pg_namespace n on n.oid = t.relnamespace and n.nspname = c.table_schema
            where c.table_schema = 'public' and c.table_name <> 'schema_version'
              and col_description(t.oid, c.ordinal_position) is null
            """
        ).fetchall()
    assert missing == []
