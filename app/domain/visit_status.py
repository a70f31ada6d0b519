"""The statuses of a visit (the journal's ``origin_visit_status.status``), named once.

``created`` and ``ongoing`` report a visit under way; the four final
statuses end it. A visit succeeded when it saved a snapshot, in full or in
part: ``SUCCESS_STATUSES`` is that definition, used by the stats, the
requests (passed to their SQL), the loaders and the simulator alike.
"""

from __future__ import annotations

from typing import Literal, get_args

VisitStatus = Literal["created", "ongoing", "full", "partial", "failed", "not_found"]
FinalStatus = Literal["full", "partial", "failed", "not_found"]

ALL_STATUSES: frozenset[str] = frozenset(get_args(VisitStatus))
FINAL_STATUSES: frozenset[str] = frozenset(get_args(FinalStatus))
SUCCESS_STATUSES: frozenset[str] = frozenset({"full", "partial"})


def is_success(status: str | None) -> bool:
    """Whether a visit that ended with ``status`` saved a snapshot (full or partial)."""
    return status in SUCCESS_STATUSES
