"""Add forge now (seed 004's workflows, issue 36): one call that schedules a
forge's lister, runs its full listing now as a request, and makes the first
visits of what it lists requests that wait for that listing.

The listing is a request with a lister instead of a visit type (kind
``add_forge_now``, base priority from the template, ``app.domain.workflows``):
running from the start, ended by the lister run. Each batch the run records
makes its origins' first visits children of that request, blocked on it; when
the listing ends they become pending (or are aborted if it failed) and the
priority lane visits them, ahead of the recurrent backlog. Aborting the
listing request aborts whatever of them is still open.
"""

from __future__ import annotations

from datetime import datetime

from app.db.connection import DictConnection
from app.domain.lister_schedule import ScheduleError
from app.domain.workflows import ADD_FORGE_NOW
from app.inputs.api import AddForge
from app.listers.plugin import UnknownListerPlugin
from app.listers.runs import schedule_lister
from app.services.requests import RequestError, start_listing_request


def add_forge(conn: DictConnection, forge: AddForge, now: datetime) -> int:
    """Schedule the forge's lister (registered if new; its next full listing now)
    and record that listing as a request; return the request's id.

    Refused with nothing written (RequestError naming the field): an unknown
    lister, arguments it does not take, a listing request already under way.
    """
    with conn.transaction():
        try:
            scheduled = schedule_lister(
                conn, forge.lister, forge.instance, now, arguments=forge.arguments, first_run=now
            )
        except UnknownListerPlugin as exc:
            raise RequestError(f"lister: {exc}") from None
        except ScheduleError as exc:
            field = "arguments" if exc.field == "arg" else exc.field
            raise RequestError(f"{field}: {exc.reason}") from None
        return start_listing_request(
            conn,
            scheduled.lister_id,
            forge.url,
            ADD_FORGE_NOW,
            forge.priority,
            forge.requested_by,
            now,
        )
