"""Cooldowns (seed 002): the least time between two visits of one origin."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class Cooldowns:
    """How long an origin rests after a visit, by the visit's outcome."""

    absolute: timedelta = timedelta(hours=12)
    scheduled: timedelta = timedelta(days=7)
    failed: timedelta = timedelta(days=14)
    not_found: timedelta = timedelta(days=31)

    def after(self, status: str | None) -> timedelta:
        """Rest after a final visit status (``None``: never visited)."""
        if status == "failed":
            return max(self.failed, self.absolute)
        if status == "not_found":
            return max(self.not_found, self.absolute)
        return self.absolute if status is not None else timedelta(0)


def eligible_at(
    last_visit: datetime | None, last_visit_status: str | None, cooldowns: Cooldowns
) -> datetime | None:
    """When the origin may be scheduled again; ``None`` if it may be at once."""
    if last_visit is None:
        return None
    return last_visit + cooldowns.after(last_visit_status)


def in_flight_since(
    last_scheduled: datetime | None,
    last_reported: datetime | None,
    now: datetime,
    cooldowns: Cooldowns,
) -> datetime | None:
    """When the origin was sent to a worker if that visit has not reported yet.

    A visit that has not reported within the scheduled cooldown is presumed
    lost, and the origin counts as schedulable again.
    """
    if last_scheduled is None:
        return None
    if last_reported is not None and last_reported >= last_scheduled:
        return None
    if now - last_scheduled >= cooldowns.scheduled:
        return None
    return last_scheduled


def presumed_lost(scheduled_at_s: float, now_s: float, cooldowns: Cooldowns) -> bool:
    """Whether a visit sent at ``scheduled_at_s`` has waited so long that the
    scheduler presumes it lost (``in_flight_since``) and has sent, or will send,
    the origin again: a worker that runs it now could run two visits of one
    origin at once."""
    return now_s - scheduled_at_s >= cooldowns.scheduled.total_seconds()
