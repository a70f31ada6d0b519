"""Cooldowns (seed 002): the least time between two visits of one origin.

A failed visit rests the origin ``failed_first`` (seed 000: "a transient
problem should be retried soon"), doubled with each further failure in a row
up to ``failed`` (the reference's flat failed cooldown). Setting both alike
gives the reference's behaviour. An origin expected to change more often
than that (age_optimal: its learned change interval is known) starts from
its change interval instead, never below ``absolute``: a failed visit leaves
it as stale as it was, and each day of rest let it fall further behind.
"""

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
    failed_first: timedelta = timedelta(days=1)
    at_risk_retries: int = 3
    """Failures in a row after which an origin at risk of max_interval
    (``placement.at_risk``) rests a doubled rest again; before, ``absolute``.
    The failures that disable an origin until its next listing
    (``max_failures_in_a_row``): past them, an origin that keeps failing is not
    hammered."""

    def after(
        self,
        status: str | None,
        failures_in_a_row: int = 1,
        change_interval: timedelta | None = None,
    ) -> timedelta:
        """Rest after a final visit status (``None``: never visited); a failed visit
        rests longer the more visits have failed in a row (``failures_in_a_row``,
        this one included; 0 is read as 1), from the origin's ``change_interval``
        when that is shorter than ``failed_first`` (``failed_rest``)."""
        if status == "failed":
            return max(self.failed_rest(failures_in_a_row, change_interval), self.absolute)
        if status == "not_found":
            return max(self.not_found, self.absolute)
        return self.absolute if status is not None else timedelta(0)

    def failed_rest(
        self, failures_in_a_row: int, change_interval: timedelta | None = None
    ) -> timedelta:
        """``failed_first`` doubled per failure in a row after the first, at most
        ``failed``. With ``change_interval`` (the mean time between the origin's
        changes, learned) shorter than ``failed_first``, the first rest is that
        interval, at least ``absolute``: an origin that changes several times a
        day and failed once is retried within hours, not a day later with a
        day's changes more to fetch (a flaky fast changer would fall further
        behind at every failure)."""
        first = self.failed_first
        if change_interval is not None and change_interval < first:
            first = max(change_interval, self.absolute)
        doublings = min(max(failures_in_a_row, 1) - 1, 60)
        rest_s = first.total_seconds() * 2.0**doublings
        return timedelta(seconds=min(rest_s, self.failed.total_seconds()))


def eligible_at(
    last_visit: datetime | None,
    last_visit_status: str | None,
    cooldowns: Cooldowns,
    failures_in_a_row: int = 1,
    change_interval: timedelta | None = None,
) -> datetime | None:
    """When the origin may be scheduled again; ``None`` if it may be at once."""
    if last_visit is None:
        return None
    return last_visit + cooldowns.after(last_visit_status, failures_in_a_row, change_interval)


def in_flight_since(
    last_scheduled: datetime | None,
    last_reported: datetime | None,
    now: datetime,
    cooldowns: Cooldowns,
) -> datetime | None:
    """When the origin was sent to a worker if that visit has not reported yet.

    Only a final status dated after the send ends its flight: the visit sent
    starts after it, so a final status at the very instant of the send is an
    earlier visit's. A visit that has not reported within the scheduled
    cooldown is presumed lost, and the origin counts as schedulable again.
    """
    if last_scheduled is None:
        return None
    if last_reported is not None and last_reported > last_scheduled:
        return None
    if now - last_scheduled >= cooldowns.scheduled:
        return None
    return last_scheduled


#: Share of its window (the scheduled cooldown, or a request's window) a visit
#: keeps in hand: the scheduler takes an origin back, or a request's origin and
#: the request, once the window has passed with no final status applied, so a
#: visit started at its very end, or whose ``created`` status reaches the
#: journal only after it, would overlap the visit sent again.
LOST_MARGIN_FRACTION = 0.1


def request_window_s(time_limit_s: float) -> float:
    """How long after it was sent a request with no final status is presumed
    lost (its message gone with a wiped broker, its worker killed) and pending
    again: twice its lane's time limit, as long to wait for a worker (its queue,
    retries, a busy hoster) as to run. Its visit starts and ends within it
    (``start_within_s``, ``finish_by_s``), so a slow one is never sent twice."""
    return 2 * time_limit_s


def start_within_s(scheduled_at_s: float, now_s: float, window_s: float) -> float:
    """Seconds left for a visit sent at ``scheduled_at_s`` to start and have its
    ``created`` status taken by the broker, keeping LOST_MARGIN_FRACTION of its
    ``window_s`` (the scheduled cooldown, or ``request_window_s``) for the
    journal to apply it; 0 or less: too late, the scheduler presumes it lost
    (``in_flight_since``, a request's deadline) and has sent, or will send,
    the origin again."""
    return scheduled_at_s + window_s * (1 - LOST_MARGIN_FRACTION) - now_s


def finish_by_s(scheduled_at_s: float, window_s: float) -> float:
    """When (Unix seconds) a visit sent at ``scheduled_at_s`` must have ended: half
    of LOST_MARGIN_FRACTION of its ``window_s`` before the scheduler presumes it
    lost, the other half left for the journal to apply its final status. A
    visit that reaches it (its worker paused by SIGSTOP, say) must do no more
    work and publish nothing: the origin is, or will be, sent again."""
    return scheduled_at_s + window_s * (1 - LOST_MARGIN_FRACTION / 2)


#: A visit is superseded when its origin was sent again later than this after
#: it (s): the mirror keeps a send time as a float, and no two sends of one
#: origin come this close.
SUPERSEDED_AFTER_S = 0.001


def superseded(sent_at_s: float | None, scheduled_at_s: float) -> bool:
    """Whether a visit sent at ``scheduled_at_s`` is older than the send of its
    origin now in flight (``sent_at_s``; None: not in flight): the scheduler
    took it for lost and sent the origin again (a request past its window), so
    the visit sent since places the origin back, and this one, late, must not
    run beside it."""
    return sent_at_s is not None and sent_at_s > scheduled_at_s + SUPERSEDED_AFTER_S
