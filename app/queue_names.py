"""Names of the Dramatiq queues revisit feeds."""

from __future__ import annotations


def visit_queue(visit_type: str) -> str:
    """The Dramatiq queue holding visits of ``visit_type``."""
    return f"visit.{visit_type}"


def priority_queue(visit_type: str) -> str:
    """The Dramatiq queue of one-shot requests (save code now) of ``visit_type``."""
    return f"visit.{visit_type}.priority"


def first_visits_queue(prefix: str, visit_type: str) -> str:
    """The queue of a lister's first visits after a listing (its first_visits_queue_prefix)."""
    return f"{prefix}.{visit_queue(visit_type)}"


#: The queue of revisit's own API actors (request_visit, record_listing, ...).
API_QUEUE = "revisit.api"
