"""A full journal batch holds back the origins that reported only created statuses,
and writes them with the next batch, where their final status usually is."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest

from actors.journal import HOLD_BATCHES, JournalClient
from app.db.connection import DictConnection
from app.domain.visit_stats import keyed_fudge
from app.kafka.client import Message, StatusPublisher
from app.kafka.codec import encode, visit_status_value
from app.services.context import Context
from app.services.journal_batch import BatchWriter
from app.settings import Settings
from tests.integration.helpers import stats_by_url
from tests.processes import wait_for

T = TypeVar("T")
URLS = [f"https://forge.example/h{i}.git" for i in range(12)]
T0 = datetime(2026, 2, 1, tzinfo=UTC)
NOW = datetime(2026, 3, 1, tzinfo=UTC)
FINALS = ("full", "failed", "partial", "full")


def journal() -> list[bytes | None]:
    """Three visits of every origin, in date order: each a created status then,
    ten minutes later, its final one, except the last visit, still running."""
    rows = []
    for i, url in enumerate(URLS):
        for visit in (1, 2, 3):
            start = T0 + timedelta(days=visit, minutes=7 * i)
            rows.append((start, url, visit, "created", None, None))
            if visit == 3:
                continue
            status = FINALS[(i + visit) % len(FINALS)]
            snapshot = bytes([visit * (i % 3)]) * 20 if status != "failed" else None
            end = start + timedelta(minutes=10)
            rows.append((end, url, visit, status, snapshot, {"duration_s": 60.0 * visit}))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [
        encode(visit_status_value(url, visit, date, status, snapshot, "git", metadata))
        for date, url, visit, status, snapshot, metadata in rows
    ]


def write_in_batches(conn: DictConnection, ctx: Context, size: int, hold: bool) -> int:
    """Write the journal in batches of ``size`` messages, as the journal client does
    (holding back what each batch lets it when ``hold``); return the row writes."""

    def run(work: Callable[[DictConnection], T]) -> T:
        return work(conn)

    writer = BatchWriter(ctx, keyed_fudge(), run, 1)
    messages = journal()
    held: list[bytes | None] = []
    try:
        for start in range(0, len(messages), size):
            payloads = held + messages[start : start + size]
            outcome, _ = writer.write(payloads, NOW, len(held) if hold else None)
            held = [payloads[i] for i in outcome.held]
        if held:
            writer.write(held, NOW)
    finally:
        writer.close()
    # every write of a row bumps its version, from 1 when inserted
    return int(conn.execute("select sum(version) as n from origin_visit_stats").fetchone()["n"])


def stats(conn: DictConnection) -> dict[str, dict[str, object]]:
    """The stats rows without their surrogate id (drawn anew once the rows are deleted)."""
    return {
        url: {k: v for k, v in row.items() if k != "id"} for url, row in stats_by_url(conn).items()
    }


def test_holding_back_created_statuses_writes_fewer_rows_for_the_same_stats(
    conn: DictConnection, ctx: Context
) -> None:
    whole = write_in_batches(conn, ctx, 8, hold=False)
    expected = stats(conn)
    conn.execute("delete from origin_visit_stats")

    held = write_in_batches(conn, ctx, 8, hold=True)

    assert stats(conn) == expected
    # one write per final status and one for each last visit, still running:
    # every created status that had a final status was folded into it
    assert held == 3 * len(URLS) < whole


def test_statuses_that_may_not_wait_longer_are_written_whatever_the_batch_holds(
    conn: DictConnection, ctx: Context
) -> None:
    def run(work: Callable[[DictConnection], T]) -> T:
        return work(conn)

    writer = BatchWriter(ctx, keyed_fudge(), run, 1)
    created = [
        encode(visit_status_value(url, 1, T0, "created", None, "git", None)) for url in URLS[:3]
    ]
    try:
        first, _ = writer.write(created, NOW, 0)
        assert first.held == [0, 1, 2]
        assert stats_by_url(conn) == {}
        second, _ = writer.write(created, NOW, len(created))
    finally:
        writer.close()
    assert second.held == []
    assert {url: row["last_visit"] for url, row in stats_by_url(conn).items()} == dict.fromkeys(
        URLS[:3], T0
    )


def test_the_client_holds_a_created_status_back_for_at_most_hold_batches_full_batches(
    settings: Settings, conn: DictConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("actors.journal_consumer.BATCH_SIZE", 1)  # every batch is full
    publisher = StatusPublisher(settings)
    for url in URLS[: HOLD_BATCHES + 2]:
        publisher.publish(url, "git", 1, "created", None, date=T0)
    client = JournalClient(settings)
    try:

        def next_batch() -> list[Message]:
            found: list[Message] = []
            wait_for(lambda: bool(found.extend(client.poll_batch()) or found), 30, "a batch")
            return found

        for _ in range(HOLD_BATCHES):
            client.process(next_batch(), NOW)
        # the first status waited out HOLD_BATCHES batches: none was applied or
        # committed yet
        assert stats_by_url(conn) == {}
        assert committed(client) == 0
        client.process(next_batch(), NOW)
        assert len(stats_by_url(conn)) == 1
        assert committed(client) == 1
        client.process([], NOW)  # a poll that found nothing: everything held is applied
        assert len(stats_by_url(conn)) == HOLD_BATCHES + 1
        assert committed(client) == HOLD_BATCHES + 1
    finally:
        client.close()


def committed(client: JournalClient) -> int:
    """Messages the group committed over the partitions the client owns."""
    partitions = client.consumer.committed(client.consumer.assignment(), 10)
    return sum(max(0, tp.offset) for tp in partitions)
