"""Applies the numbered migrations of ``sql/migrations`` and records the version."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_ID = 0x7265766973  # "revis": serialises concurrent migrators


@dataclass(frozen=True)
class Migration:
    """One numbered schema change."""

    version: int
    name: str
    sql: str


def available() -> list[Migration]:
    """All migrations shipped with the package, in order."""
    found = []
    for entry in (resources.files("sql") / "migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


def current_version(conn: psycopg.Connection[object]) -> int:
    """The highest applied migration (0 on an empty database)."""
    conn.execute(
        "create table if not exists schema_version ("
        " version integer primary key,"
        " name text not null,"
        " applied_at timestamptz not null default now())"
    )
    row = conn.execute("select coalesce(max(version), 0) from schema_version").fetchone()
    return int(row[0]) if row else 0  # type: ignore[index]


def migrate(dsn: str, target: int | None = None) -> list[Migration]:
    """Apply pending migrations up to ``target``; return those applied."""
    applied: list[Migration] = []
    with psycopg.connect(dsn) as conn:
        conn.execute("select pg_advisory_xact_lock(%s)", (_LOCK_ID,))
        version = current_version(conn)
        for migration in available():
            if migration.version <= version or (target is not None and migration.version > target):
                continue
            conn.execute(migration.sql.encode())
            conn.execute(
                "insert into schema_version (version, name) values (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration)
    return applied
