"""The lister interface: what listers written for the reference scheduler call.

``ListerInterface`` has the reference's method names, arguments and
semantics (``swh.scheduler.interface.SchedulerInterface``, lister part), so
the RPC server (``app.rpc``) and the actor API serve it unchanged; beyond the
reference, ``record_listed_origins`` places new and changed origins in the
Redis mirror, so they are scheduled at once.

Arguments arrive as plain values (dicts, lists, strings): each is validated
and a bad one raises ListerInputError naming it, before anything is written.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import Field, StrictBool, StrictStr

from app.db import lister_api as sql
from app.db import listings as db
from app.db.connection import DictConnection, in_transaction
from app.db.errors import refusal
from app.inputs.listing import ListedOriginIn, ListingInputError, check_last_updates
from app.listers.models import (
    ListedOrigin,
    ListedOriginPage,
    Lister,
    ListerInputError,
    OriginVisitStats,
    StaleData,
    checked,
    parse,
)
from app.services.context import Context
from app.services.listing import place_recorded
from app.services.visit_types import add_listed_visit_types

#: The reference's page size.
DEFAULT_PAGE_SIZE = 1000
#: Bytes of URLs and loader arguments a page of listed origins holds at most,
#: whatever its ``limit`` (the reference has no bound): a page that would
#: weigh more ends early, with the token of the next one.
MAX_PAGE_BYTES = 64 * 1024 * 1024
#: The fields of a listed origin a lister reports (the others are revisit's).
LISTING_FIELDS = set(ListedOriginIn.__struct_fields__)
#: The last_visit_status of the reference's OriginVisitStats, from revisit's statuses.
REFERENCE_STATUS = {
    "full": "successful",
    "partial": "successful",
    "failed": "failed",
    "not_found": "not_found",
}

#: A lister's name.
Name = Annotated[str, Field(strict=True, min_length=1)]


class ListerInterface:
    """The reference's lister methods on one connection (autocommit) and the
    process's Redis mirror; ``clock`` stamps recorded origins."""

    def __init__(self, conn: DictConnection, ctx: Context, clock: Callable[[], datetime]) -> None:
        self.conn, self.ctx, self.clock = conn, ctx, clock

    def get_listers(self, with_first_visits_to_schedule: bool = False) -> list[Lister]:
        """Every lister instance (or those whose first visits are still to schedule)."""
        rows = sql.listers(
            self.conn, only_first_visits_to_schedule=bool(with_first_visits_to_schedule)
        )
        return [Lister.model_validate(r) for r in rows]

    @checked
    def get_listers_by_id(self, lister_ids: list[UUID] | None) -> list[Lister]:
        """The lister instances of these ids (unknown ones are left out)."""
        rows = sql.listers_by_id(self.conn, lister_ids or [])
        return [Lister.model_validate(r) for r in rows]

    @checked
    def get_lister(self, name: Name, instance_name: str | None = None) -> Lister | None:
        """The lister instance, or None if it is not registered."""
        row = sql.lister_by_name(self.conn, name, instance_name or "")
        return Lister.model_validate(row) if row else None

    @checked
    def get_or_create_lister(
        self,
        name: Name,
        instance_name: str | None = None,
        first_visits_queue_prefix: str | None = None,
    ) -> Lister:
        """The lister instance, registered first if new (an existing one is unchanged)."""
        row = sql.get_or_create_lister(
            self.conn, name, instance_name or "", first_visits_queue_prefix
        )
        return Lister.model_validate(row)

    @checked
    def update_lister(self, lister: Lister) -> Lister:
        """Write the lister's state; StaleData if ``updated`` is not the stored
        stamp (which moves only when the state is written)."""
        if lister.id is None or lister.updated is None:
            raise ListerInputError("lister.id and lister.updated: required to update a lister")
        row = refusing_bad_values(
            lambda: sql.update_lister(self.conn, lister.model_dump()), "lister"
        )
        if row is None:
            raise StaleData("Stale data; Lister state not updated")
        return Lister.model_validate(row)

    @checked
    def record_listed_origins(
        self, listed_origins: list[Any], update_last_seen: StrictBool = True
    ) -> list[ListedOrigin]:
        """Upsert the origins (one transaction per lister); return them as stored.
        ``update_last_seen`` False keeps the ``last_seen`` of those already listed."""
        origins = [
            parse(ListedOrigin, o, f"listed_origins[{i}]") for i, o in enumerate(listed_origins)
        ]
        by_lister: dict[UUID, list[tuple[int, ListedOriginIn]]] = defaultdict(list)
        for index, origin in enumerate(origins):
            try:
                row = ListedOriginIn(**origin.model_dump(include=LISTING_FIELDS))
            except ValueError as exc:  # the listing rules shared with import and API
                raise ListerInputError(f"listed_origins[{index}].{exc}") from None
            by_lister[origin.lister_id].append((index, row))
        found = sql.known_listers(self.conn, list(by_lister))
        for lister_id, rows in by_lister.items():
            if lister_id not in found:
                raise ListerInputError(
                    f"listed_origins[{rows[0][0]}].lister_id: no lister {lister_id} is registered"
                )
            try:
                check_last_updates(rows, self.clock())
            except ListingInputError as exc:
                first = exc.errors[0]
                raise ListerInputError(
                    f"listed_origins[{first.line}].{first.field}: {first.message}"
                ) from None
        recorded: list[ListedOrigin] = []
        for lister_id, rows in by_lister.items():
            recorded += self._record(lister_id, rows, update_last_seen)
        return recorded

    def _record(
        self, lister_id: UUID, rows: list[tuple[int, ListedOriginIn]], update_last_seen: bool
    ) -> list[ListedOrigin]:
        now = self.clock()

        def write(conn: DictConnection) -> tuple[list[Any], list[dict[str, Any]]]:
            add_listed_visit_types(conn, {r.visit_type for _, r in rows}, now)
            changed = db.upsert_listed_origins(
                conn, lister_id, [r for _, r in rows], now, update_last_seen
            )
            return changed, sql.recorded_origins(conn, lister_id)

        # A deadlock with a scheduling step (which stamps rows by id) is run again.
        changed, stored = refusing_bad_values(
            lambda: in_transaction(self.conn, write), "listed_origins"
        )
        place_recorded(self.ctx, changed, now)
        return [ListedOrigin.model_validate(r) for r in stored]

    def get_listed_origins(
        self,
        lister_id: Any = None,
        url: str | None = None,
        urls: list[str] | None = None,
        enabled: bool | None = True,
        limit: int = DEFAULT_PAGE_SIZE,
        page_token: Any = None,
    ) -> ListedOriginPage:
        """One page of listed origins in (lister_id, url, visit_type) order: up to
        ``limit``, fewer (with a token) once the page holds MAX_PAGE_BYTES."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ListerInputError(f"limit: expected a positive integer, got {limit!r}")
        wanted = [url] if url is not None else (list(urls) if urls else None)
        after = _page_token(page_token)
        if after and after[2] is None:
            after = after[0], after[1], sql.last_visit_type(self.conn, after[0], after[1])
        params = {
            "lister_id": uuid_of(lister_id, "lister_id") if lister_id is not None else None,
            "urls": wanted,
            "enabled": enabled,
            "after_lister_id": after[0] if after else None,
            "after_url": after[1] if after else None,
            "after_visit_type": after[2] if after else None,
            "limit": limit,
        }
        rows, cut = sql.listed_origins_page(self.conn, params, MAX_PAGE_BYTES)
        results = [ListedOrigin.model_validate(r) for r in rows]
        token = None
        if results and (cut or len(results) == limit):
            last = results[-1]
            token = (str(last.lister_id), last.url, last.visit_type)
        return ListedOriginPage(results=results, next_page_token=token)

    @checked
    def get_visit_types_for_listed_origins(self, lister: Lister) -> list[str]:
        """The visit types of the origins a lister has listed."""
        if lister.id is None:
            raise ListerInputError("lister.id: required")
        return sql.lister_visit_types(self.conn, lister.id)

    @checked
    def origin_visit_stats_get(
        self, ids: list[tuple[StrictStr, StrictStr]] | None
    ) -> list[OriginVisitStats]:
        """The visit stats of these (url, visit_type) pairs; unknown pairs are left out."""
        return [_stats(r) for r in sql.visit_stats(self.conn, ids)] if ids else []

    def visit_scheduler_queue_position_get(self) -> dict[str, int]:
        """The recurrent scheduler's queue position per visit type, in Unix seconds."""
        return sql.queue_positions(self.conn)


def refusing_bad_values(write: Callable[[], Any], field: str) -> Any:
    """Run ``write``; a value PostgreSQL refuses is bad input naming ``field``."""
    try:
        return write()
    except Exception as exc:
        detail = refusal(exc)
        if detail is None:
            raise
        raise ListerInputError(f"{field}: refused by the database: {detail}") from None


def uuid_of(value: Any, field: str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ListerInputError(f"{field}: not a UUID: {value!r}") from None


def _page_token(token: Any) -> tuple[UUID, str, str | None] | None:
    """The token returned with the previous page: (lister_id, url, visit_type), or
    the reference's (lister_id, url), which resumes after every visit type of the URL."""
    if token is None:
        return None
    if isinstance(token, list | tuple) and len(token) in (2, 3):
        parts = [str(p) for p in token]
        visit_type = parts[2] if len(parts) == 3 else None
        return uuid_of(parts[0], "page_token[0]"), parts[1], visit_type
    raise ListerInputError(f"page_token: expected the token of the previous page, got {token!r}")


def _stats(row: dict[str, Any]) -> OriginVisitStats:
    position = row["next_visit_queue_position"]
    fields = {
        **row,
        "last_visit_status": REFERENCE_STATUS.get(row["last_visit_status"] or ""),
        "next_visit_queue_position": int(position.timestamp()) if position else None,
        "last_snapshot": bytes(row["last_snapshot"]) if row["last_snapshot"] else None,
    }
    return OriginVisitStats.model_validate(fields)
