"""The loader interface and the registry of loaders by visit type."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol

from app.domain.visit_status import FINAL_STATUSES

ENTRY_POINT_GROUP = "revisit.loaders"


@dataclass(frozen=True, slots=True)
class VisitResult:
    """Outcome of one visit, as published to the journal."""

    status: str  # 'full', 'partial', 'failed' or 'not_found'
    snapshot: bytes | None
    duration_s: float
    error: str | None = None
    #: A failure worth retrying soon (network trouble), as opposed to one that
    #: would fail the same way again.
    transient: bool = False
    #: The loader gave up at its own time limit (the lane's): an express-lane
    #: visit then moves to the slow lane, a slow-lane one fails for good.
    timed_out: bool = False
    #: The loader's storage recorded this outcome, and its journal publishes it
    #: (the archive's loaders); False when the visit never reached it.
    archived: bool = False


#: What a loader may report (the journal's final statuses).
RESULT_STATUSES = FINAL_STATUSES
SNAPSHOT_BYTES = 20
#: Longest error text published; a loader's whole traceback is not a reason.
MAX_ERROR_CHARS = 500


def checked_result(result: object, duration_s: float) -> VisitResult:
    """``result`` if it is a valid VisitResult, else a ``failed`` one saying why.

    A loader's bug must not reach the journal as an invalid status (the
    journal would dead-letter it and the visit's request would never end): the
    worker publishes what this returns.
    """
    if not isinstance(result, VisitResult):
        return VisitResult("failed", None, duration_s, f"invalid loader result: {result!r:.200}")
    problem = None
    if result.status not in RESULT_STATUSES:
        problem = (
            f"status {result.status!r:.100} (expected one of {', '.join(sorted(RESULT_STATUSES))})"
        )
    elif result.snapshot is not None and (
        not isinstance(result.snapshot, bytes) or len(result.snapshot) != SNAPSHOT_BYTES
    ):
        problem = f"snapshot {result.snapshot!r:.100} (expected {SNAPSHOT_BYTES} bytes or None)"
    elif not isinstance(result.duration_s, int | float) or not 0 <= result.duration_s < 1e9:
        problem = f"duration_s {result.duration_s!r}"
    if problem is not None:
        return VisitResult("failed", None, duration_s, f"invalid loader result: {problem}")
    if result.error is not None and len(result.error) > MAX_ERROR_CHARS:
        return replace(result, error=result.error[:MAX_ERROR_CHARS] + "…")
    return result


class Loader(Protocol):
    """Visits origins of one visit type. Owns its I/O timeouts: Dramatiq cannot
    interrupt a blocking call."""

    #: Whether the worker publishes the visit's statuses to the journal (revisit's
    #: own loaders), or the loader's storage does (the archive's loaders: its
    #: journal writer, with its own visit numbers).
    publishes_statuses: ClassVar[bool]

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Visit ``url`` and report the snapshot found."""
        ...


class UnknownLoader(LookupError):
    """No loader is installed for a visit type."""


def installed_loaders() -> set[str]:
    """Visit types with a loader installed (entry points, not loaded)."""
    return {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}


def get_loader(visit_type: str, name: str | None = None) -> Loader:
    """The loader registered under ``name`` (default: ``visit_type``) in the
    ``revisit.loaders`` entry points."""
    name = name or visit_type
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            factory = ep.load()
            loader: Loader = factory()
            return loader
    known = ", ".join(sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)))
    which = "" if name == visit_type else f" {name!r}"
    raise UnknownLoader(f"no loader{which} for visit type {visit_type!r} (installed: {known})")


@cache
def publishes_statuses(loader_name: str) -> bool:
    """Whether the worker publishes the statuses of the visits of ``loader_name``
    (an uninstalled loader's failures it does publish)."""
    try:
        return bool(getattr(get_loader(loader_name), "publishes_statuses", True))
    except UnknownLoader:
        return True
