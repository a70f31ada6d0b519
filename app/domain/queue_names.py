"""Names of the Dramatiq queues revisit feeds."""

from __future__ import annotations

from app.domain.lanes import Lane


def lane_queue(visit_type: str, lane: Lane) -> str:
    """The Dramatiq queue of one lane (express, slow, priority) of ``visit_type``."""
    return f"visit.{visit_type}.{lane}"


def visit_queue(visit_type: str) -> str:
    """The queue recurrent visits of ``visit_type`` are first sent to: the express lane."""
    return lane_queue(visit_type, "express")


def slow_queue(visit_type: str) -> str:
    """The slow lane of ``visit_type``: predicted-slow visits and express time-outs."""
    return lane_queue(visit_type, "slow")


def priority_queue(visit_type: str) -> str:
    """The Dramatiq queue of one-shot requests (save code now) of ``visit_type``."""
    return lane_queue(visit_type, "priority")


#: The lane of first visits after a listing (a lister's own queue).
FIRST_VISITS = "first_visits"


def first_visits_queue(prefix: str, visit_type: str) -> str:
    """The queue of a lister's first visits after a listing (its first_visits_queue_prefix)."""
    return f"{prefix}.visit.{visit_type}"


#: The queue of revisit's own API actors (request_visit, record_listing, ...).
API_QUEUE = "revisit.api"

#: The queue of recurrent lister runs (``revisit lister worker``).
LISTER_QUEUE = "revisit.listers"
