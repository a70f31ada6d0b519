"""Named SQL queries, loaded from the ``-- name: NAME`` blocks of ``sql/queries/*.sql``.

A block may include another by name, ``{{NAME}}``: a projection several
queries share (the mirror row) is written once. Only the package's own
constant SQL is ever included, never a value.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import LiteralString

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
INCLUDED = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")


def parse_blocks(text: str) -> dict[str, str]:
    """Split a SQL file into its named blocks."""
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise ValueError(f"query {name!r} defined twice")
        blocks[name] = body.strip()
    return blocks


@lru_cache(maxsize=1)
def all_queries() -> dict[str, str]:
    """Every named query of the package, by name, its includes expanded."""
    found = raw_queries()
    return {name: _expand(body, found) for name, body in found.items()}


def raw_queries() -> dict[str, str]:
    """Every named block of the package as written."""
    found: dict[str, str] = {}
    folder = resources.files("sql") / "queries"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, body in parse_blocks(entry.read_text()).items():
                if name in found:
                    raise ValueError(f"query {name!r} defined twice")
                found[name] = body
    return found


def _expand(body: str, blocks: dict[str, str]) -> str:
    """``body`` with every ``{{NAME}}`` replaced by the block of that name (one level)."""

    def included(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in blocks:
            raise ValueError(f"query includes {name!r}, which no block defines")
        return _without_comments(blocks[name])

    return INCLUDED.sub(included, body)


def _without_comments(body: str) -> str:
    return "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))


def query(name: str) -> LiteralString:
    """The SQL text of one named query (trusted: it ships with the package)."""
    return all_queries()[name]
