"""Names of the Dramatiq queues revisit feeds."""

from __future__ import annotations


def visit_queue(visit_type: str) -> str:
    """The Dramatiq queue holding visits of ``visit_type``."""
    return f"visit.{visit_type}"


def priority_queue(visit_type: str) -> str:
    """The Dramatiq queue of one-shot requests (save code now) of ``visit_type``."""
    return f"visit.{visit_type}.priority"


#: The queue of revisit's own API actors (request_visit, record_listing, ...).
API_QUEUE = "revisit.api"
