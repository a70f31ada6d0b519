"""Visit types and their settings, in PostgreSQL."""

from __future__ import annotations

from typing import Any

from app.db.connection import DictConnection
from app.db.queries import query
from app.domain.policies import default_policies


def insert_visit_type(conn: DictConnection, settings: dict[str, Any]) -> bool:
    """Create a visit type with its default policies; False if the name is taken."""
    with conn.transaction():
        if conn.execute(query("insert_visit_type"), settings).fetchone() is None:
            return False
        for policy, weight in default_policies(settings["name"]).items():
            conn.execute(
                query("insert_policy"),
                {"visit_type": settings["name"], "policy": policy, "weight": weight},
            )
    return True


def update_visit_type(conn: DictConnection, settings: dict[str, Any]) -> dict[str, Any] | None:
    """Change the settings given (not None) of a visit type; its new intervals, None if unknown."""
    return conn.execute(query("update_visit_type"), settings).fetchone()


def list_visit_types(conn: DictConnection) -> list[dict[str, Any]]:
    """Every visit type, its settings and how many enabled origins it has."""
    return conn.execute(query("list_visit_types")).fetchall()


def visit_type_loaders(conn: DictConnection) -> dict[str, str]:
    """The loader (entry point name) of every visit type, by visit type."""
    return {str(r["name"]): str(r["loader"]) for r in conn.execute(query("visit_type_loaders"))}
