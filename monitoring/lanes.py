"""Lane labels: which worker pool a visit queue feeds, named from the queue."""

from __future__ import annotations

from app.domain.queue_names import FIRST_VISITS

__all__ = ["FIRST_VISITS", "lane_of"]


def lane_of(queue_name: str, visit_type: str) -> str:
    """The lane of ``queue_name``: the suffix for ``visit.<vt>.<lane>`` (priority,
    express, slow), ``first_visits`` for a lister's ``<prefix>.visit.<vt>``, and
    the queue name itself otherwise."""
    base = f"visit.{visit_type}"
    if queue_name.startswith(base + "."):
        return queue_name[len(base) + 1 :]
    if queue_name.endswith("." + base):
        return FIRST_VISITS
    return queue_name
