"""The loader interface and the registry of loaders by visit type."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol

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


class Loader(Protocol):
    """Visits origins of one visit type. Owns its I/O timeouts: Dramatiq cannot
    interrupt a blocking call."""

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Visit ``url`` and report the snapshot found."""
        ...


class UnknownLoader(LookupError):
    """No loader is installed for a visit type."""


def get_loader(visit_type: str) -> Loader:
    """The loader registered under ``visit_type`` in the ``revisit.loaders`` entry points."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == visit_type:
            factory = ep.load()
            loader: Loader = factory()
            return loader
    known = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    raise UnknownLoader(f"no loader for visit type {visit_type!r} (installed: {', '.join(known)})")
