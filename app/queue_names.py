"""Names of the Dramatiq queues revisit feeds."""

from __future__ import annotations


def visit_queue(visit_type: str) -> str:
    """The Dramatiq queue holding visits of ``visit_type``."""
    return f"visit.{visit_type}"
