"""One journal batch written to PostgreSQL, possibly over several connections.

The batch is decoded and validated in one transaction, its origins split into
disjoint groups written in parallel (one connection each, so PostgreSQL works
on several cores), and the outcomes merged. A batch PostgreSQL refuses (a
value that got past validation) is written again message by message, so only
the refused message is rejected and everything else, including the requests
its visits finished, is reported as usual.

How the work reaches the database is injected (``DatabaseRunner``): the
journal client's runner reconnects and retries until PostgreSQL answers.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Protocol, TypeVar

import psycopg

from app.db.connection import DictConnection
from app.db.errors import is_refused_value
from app.db.scheduling import VisitTypeConfig
from app.domain.journal_event import VisitStatusEvent
from app.domain.placement import MirrorRow
from app.services.context import Context
from app.services.journal import (
    BatchOutcome,
    Rejected,
    configs_for,
    decode_batch,
    write_batch,
)

log = logging.getLogger("revisit.journal")
T = TypeVar("T")
Written = tuple[BatchOutcome, list[MirrorRow]]


class PartlyWritten(Exception):
    """A batch split over connections was refused after some of its groups had
    committed (``committed``: their outcomes); ``cause`` is PostgreSQL's error."""

    def __init__(self, cause: psycopg.Error, committed: list[Written]) -> None:
        super().__init__(str(cause))
        self.cause, self.committed = cause, committed


class DatabaseRunner(Protocol):
    """Runs ``work`` on a connection of its own and returns what it returns."""

    def __call__(self, work: Callable[[DictConnection], T]) -> T: ...


def split_by_origin(events: list[VisitStatusEvent], parts: int) -> list[list[VisitStatusEvent]]:
    """Events in ``parts`` groups with no origin in two groups (empty groups dropped)."""
    if parts <= 1:
        return [events]
    groups: list[list[VisitStatusEvent]] = [[] for _ in range(parts)]
    # the group of each (origin, visit type), hashed once: a batch has several
    # messages per origin
    group_of: dict[tuple[str, str], list[VisitStatusEvent]] = {}
    for event in events:
        key = (event.origin, event.visit_type)
        group = group_of.get(key)
        if group is None:
            hashed = zlib.crc32(f"{event.origin}\x00{event.visit_type}".encode())
            group = group_of[key] = groups[hashed % parts]
        group.append(event)
    return [g for g in groups if g] or [events]


def merge_outcomes(results: list[Written]) -> Written:
    """One outcome for a batch written as several parts (groups, or single messages)."""
    total = BatchOutcome()
    rows: list[MirrorRow] = []
    for outcome, written in results:
        total.applied += outcome.applied
        total.rejected += outcome.rejected
        total.written += outcome.written
        total.outcomes.update(outcome.outcomes)
        total.beyond_history.update(outcome.beyond_history)
        total.finished_requests += outcome.finished_requests
        rows += written
    return total, rows


class BatchWriter:
    """Writes journal batches on ``writers`` connections reached through ``run``."""

    def __init__(self, ctx: Context, run: DatabaseRunner, writers: int) -> None:
        self.ctx = ctx
        self.run = run
        self.writers = max(1, writers)
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.writers - 1))

    def write(self, payloads: list[bytes | None], now: datetime) -> Written:
        """Decode, validate and write ``payloads``; return the outcome and the rows
        to re-place. A batch PostgreSQL refuses is written message by message."""
        committed: list[Written] = []
        try:
            return self.run(self._transaction(payloads, now))
        except PartlyWritten as partly:
            exc, committed = partly.cause, partly.committed
        except psycopg.Error as refused:
            if not is_refused_value(refused):
                raise
            exc = refused
        log.warning("batch refused by PostgreSQL (%s); applying it message by message", exc)
        outcome, rows = self._one_by_one(payloads, now)
        # Groups committed before the refusal finished their requests then: the
        # messages applied again find them ended, so they are reported from there.
        for done, written in committed:
            outcome.finished_requests += done.finished_requests
            rows += written
        return outcome, rows

    def close(self) -> None:
        """Stop the writer threads."""
        self._pool.shutdown(wait=True)

    def _transaction(
        self, payloads: list[bytes | None], now: datetime
    ) -> Callable[[DictConnection], Written]:
        def transaction(conn: DictConnection) -> Written:
            events, rejected = decode_batch(payloads)
            configs = configs_for(conn, events, now)
            groups = split_by_origin(events, self.writers)
            if len(groups) == 1:
                outcome, rows = write_batch(conn, self.ctx, events, configs, now)
            else:
                outcome, rows = self._write_groups(conn, groups, configs, now)
            outcome.rejected = rejected
            return outcome, rows

        return transaction

    def _write_groups(
        self,
        conn: DictConnection,
        groups: list[list[VisitStatusEvent]],
        configs: dict[str, VisitTypeConfig],
        now: datetime,
    ) -> Written:
        """Write disjoint groups of origins in parallel transactions, one per
        connection; the caller commits offsets only after every group committed."""

        def on(group: list[VisitStatusEvent]) -> Written:
            return self.run(lambda c: write_batch(c, self.ctx, group, configs, now))

        futures = [self._pool.submit(on, g) for g in groups[1:]]
        refused: psycopg.Error | None = None
        committed: list[Written] = []
        try:
            committed.append(write_batch(conn, self.ctx, groups[0], configs, now))
        except psycopg.Error as exc:
            refused = exc
        for future in futures:
            try:
                committed.append(future.result())
            except psycopg.Error as exc:
                refused = refused or exc
        if refused is None:
            return merge_outcomes(committed)
        if not is_refused_value(refused):
            raise refused  # unavailable, or a conflict: the runner retries the batch
        # Each group commits its own transaction: what the others did is kept
        # for the report of the message-by-message retry.
        raise PartlyWritten(refused, committed) from refused

    def _one_by_one(self, payloads: list[bytes | None], now: datetime) -> Written:
        """Each message in its own transaction: only what PostgreSQL refuses is rejected."""
        results: list[Written] = []
        for index, payload in enumerate(payloads):
            try:
                outcome, written = self.run(self._transaction([payload], now))
            except psycopg.Error as exc:
                if not is_refused_value(exc):
                    raise
                outcome, written = BatchOutcome(), []
                outcome.rejected = [Rejected(0, f"database: {exc}")]
            outcome.rejected = [Rejected(index, r.reason) for r in outcome.rejected]
            results.append((outcome, written))
        return merge_outcomes(results)
