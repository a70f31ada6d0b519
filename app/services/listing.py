"""Recording a lister's output: Postgres first, then the Redis mirror.

A listing is either incremental (it reports some origins; nothing else
changes) or full (it reports every origin the forge has; when it finishes,
the lister's origins it did not report are disabled). A full listing may
arrive in many batches between ``start_listing`` and ``finish_listing``.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from app.db import listings as db
from app.db.connection import DictConnection, in_transaction
from app.domain.placement import MirrorRow
from app.inputs.listing import ListingInputError, NumberedRow, RowError, check_last_updates
from app.services.context import Context
from app.services.mirror_sync import place_rows
from app.services.visit_types import add_listed_visit_types

#: Most of a lister's origins a full listing may disable without an explicit flag
#: (``revisit origins import --allow-mass-disable``, record_listing allow_mass_disable).
MAX_DISABLE_SHARE = 0.5


def record_listed_origins(
    conn: DictConnection,
    ctx: Context,
    lister_id: uuid.UUID,
    rows: Sequence[NumberedRow],
    now: datetime,
) -> int:
    """Record one batch of ``rows`` for a lister, all or nothing (a visit type
    nobody added is created, paused). Returns how many rows were recorded."""
    changed = _write_postgres(conn, lister_id, rows, now)
    place_recorded(ctx, changed, now)
    return len(rows)


def _write_postgres(
    conn: DictConnection, lister_id: uuid.UUID, rows: Sequence[NumberedRow], now: datetime
) -> list[tuple[MirrorRow, bool]]:
    check_last_updates(rows, now)

    def write(conn: DictConnection) -> list[tuple[MirrorRow, bool]]:
        add_listed_visit_types(conn, {r.visit_type for _, r in rows}, now)
        return db.upsert_listed_origins(conn, lister_id, [r for _, r in rows], now)

    # A deadlock with a scheduling step (which stamps rows by id) is run again.
    return in_transaction(conn, write)


def place_recorded(ctx: Context, changed: list[tuple[MirrorRow, bool]], now: datetime) -> None:
    """Place in the Redis mirror the origins a committed listing batch added or moved
    (what ``app.db.listings.upsert_listed_origins`` returned)."""
    place_rows(ctx, [row for row, inserted in changed if inserted], now, new=True)
    place_rows(ctx, [row for row, inserted in changed if not inserted], now, keep_inflight=True)


@dataclass
class ImportReport:
    """What a bulk import did."""

    recorded: int = 0
    refused: list[ListingInputError] = field(default_factory=list)


_DONE = object()

#: Postgres connections an import writes batches on by default: one more than
#: the 2 cores keeps the server busy while the interpreter parses and places
#: (figures in benchmarks/README.md).
IMPORT_WRITERS = 3


def import_listing(
    conn: DictConnection,
    ctx: Context,
    lister_id: uuid.UUID,
    parsed: Iterable[list[NumberedRow] | ListingInputError],
    clock: Callable[[], datetime],
    extra_connections: Sequence[DictConnection] = (),
) -> ImportReport:
    """Record a listing batch by batch; a refused batch is reported, the others go on.

    The stages overlap on separate threads: parsing the next batch, writing
    batches to Postgres (one writer per connection: ``conn`` and the
    ``extra_connections``, so the server works on several cores; their waits
    free the interpreter), and placing written batches in Redis. Each batch
    reaches Redis only after its Postgres transaction committed.
    """
    report = ImportReport()
    counting = threading.Lock()
    to_postgres: queue.Queue[object] = queue.Queue(maxsize=2)
    to_redis: queue.Queue[object] = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def parse() -> None:
        try:
            for batch in parsed:
                to_postgres.put(batch)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            to_postgres.put(_DONE)

    def place() -> None:
        # Every committed batch is placed, even after another batch failed: a
        # batch in Postgres but not in the mirror would wait for a rebuild.
        while (item := to_redis.get()) is not _DONE:
            try:
                place_recorded(ctx, *item)  # type: ignore[misc]
            except BaseException as exc:
                failure.append(exc)

    def write(connection: DictConnection) -> None:
        while (batch := to_postgres.get()) is not _DONE and not failure:
            if isinstance(batch, ListingInputError):
                with counting:
                    report.refused.append(batch)
                continue
            rows: list[NumberedRow] = batch  # type: ignore[assignment]
            try:
                now = clock()
                to_redis.put((_write_postgres(connection, lister_id, rows, now), now))
                with counting:
                    report.recorded += len(rows)
            except ListingInputError as exc:
                with counting:
                    report.refused.append(exc)
            except psycopg.DataError as exc:
                # A value the database refuses is bad input: that batch is refused.
                with counting:
                    report.refused.append(refused_by_database(rows, exc))
            except BaseException as exc:
                failure.append(exc)
        to_postgres.put(_DONE)  # let the other writers see the end too

    threads = [threading.Thread(target=parse, daemon=True), threading.Thread(target=place)]
    writers = [threading.Thread(target=write, args=(c,)) for c in extra_connections]
    for thread in [*threads, *writers]:
        thread.start()
    try:
        write(conn)
    finally:
        for thread in writers:
            thread.join()
        to_redis.put(_DONE)
        threads[1].join()
    if failure:
        raise failure[0]
    return report


def refused_by_database(rows: list[NumberedRow], exc: psycopg.DataError) -> ListingInputError:
    """The refusal of a batch PostgreSQL would not take (the lines it spans)."""
    first, last = rows[0][0], rows[-1][0]
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ListingInputError([RowError(first, f"(lines {first}-{last})", f"PostgreSQL: {reason}")])


class MassDisable(ValueError):
    """A full listing would disable more of its lister's origins than allowed."""

    def __init__(self, unseen: int, enabled: int, share: float) -> None:
        self.unseen, self.enabled, self.share = unseen, enabled, share
        super().__init__(
            f"full: the listing would disable {unseen} of the lister's {enabled} origins, "
            f"more than the allowed share {share:g}; "
            "nothing was disabled"
        )


def start_listing(conn: DictConnection, lister_id: uuid.UUID, now: datetime) -> datetime:
    """Begin a listing; returns its start, to pass to ``finish_listing``."""
    db.start_listing(conn, lister_id, now)
    return now


def finish_listing(
    conn: DictConnection,
    ctx: Context,
    lister_id: uuid.UUID,
    started: datetime,
    now: datetime,
    *,
    full: bool,
    max_disable_share: float = 1.0,
) -> int:
    """End a listing. A full one disables the lister's origins it did not report
    since ``started``; returns how many origins were disabled.

    A full listing that would disable more than ``max_disable_share`` of the
    lister's enabled origins (an empty or truncated file, most likely) raises
    MassDisable and disables nothing: the listing stays unfinished.
    """
    if not full:
        db.finish_listing(conn, lister_id, now)
        return 0

    def disable(conn: DictConnection) -> list[MirrorRow]:
        unseen, enabled = db.count_unseen(conn, lister_id, started)
        if unseen and unseen > max_disable_share * enabled:
            raise MassDisable(unseen, enabled, max_disable_share)
        return db.disable_unseen(conn, lister_id, started, now)

    # Its rows are updated in no set order: a deadlock with a journal batch or a
    # scheduling step is run again.
    changed = in_transaction(conn, disable)
    place_rows(ctx, changed, now)
    return len(changed)
