"""The journal client against crashes, shared partitions and a lost database connection."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from pydantic import SecretStr

from actors.journal import JournalClient
from app.db.connection import DictConnection, connect
from app.kafka.client import StatusPublisher
from app.services.context import Context
from app.services.mirror_sync import check
from app.settings import Settings
from tests.integration import journal_crash
from tests.integration.helpers import list_origins, stats_by_url
from tests.processes import running, wait_for, with_constants

ROOT = Path(__file__).resolve().parents[2]
URLS = [f"https://forge.example/r{i}.git" for i in range(6)]
POSITION = datetime(2026, 3, 1, tzinfo=UTC)
T0 = datetime(2026, 2, 1, tzinfo=UTC)
FINALS = ["full", "full", "failed", "partial", "not_found", "full"]


def prepare(conn: DictConnection, ctx: Context) -> None:
    """The same origins, listed in the same order, and a fixed queue position."""
    list_origins(conn, ctx, URLS, now=T0)
    conn.execute(
        "insert into visit_scheduler_queue_position (visit_type, position) values ('git', %s)",
        (POSITION,),
    )


def publish_visits(settings: Settings, visits: int = 3) -> int:
    """created + final statuses of ``visits`` visits of every origin; return the count."""
    publisher = StatusPublisher(settings)
    count = 0
    for visit in range(1, visits + 1):
        for i, url in enumerate(URLS):
            date = T0 + timedelta(days=visit, minutes=i)
            publisher.publish(url, "git", visit, "created", None, date=date)
            status = FINALS[(i + visit) % len(FINALS)]
            snapshot = bytes([visit * (i % 2)]) * 20 if status in ("full", "partial") else None
            publisher.publish(
                url, "git", visit, status, snapshot, {"duration_s": 1.5 * visit}, date=date
            )
            count += 2
    return count


@pytest.fixture
def clean(
    service_env: dict[str, str], template_dsn: str, settings: Settings
) -> Iterator[tuple[Settings, DictConnection, Context]]:
    """A second database, Redis namespace and group for a clean pass over the same topic."""
    name = f"c_{uuid.uuid4().hex[:12]}"
    admin = service_env["REVISIT_DATABASE_URL"]
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"create database {name} template revisit_template")  # type: ignore[arg-type]
    info = psycopg.conninfo.conninfo_to_dict(admin)
    info["dbname"] = name
    clean_settings = settings.model_copy(
        update={
            "database_url": SecretStr(psycopg.conninfo.make_conninfo(**info)),  # type: ignore[arg-type]
            "journal_group_id": settings.journal_group_id + "-clean",
            "redis_namespace": "clean",
        }
    )
    with connect(clean_settings) as clean_conn:
        clean_ctx = Context.from_settings(clean_settings)
        prepare(clean_conn, clean_ctx)
        yield clean_settings, clean_conn, clean_ctx
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"drop database if exists {name} with (force)")  # type: ignore[arg-type]


def clean_pass(settings: Settings, conn: DictConnection, messages: int) -> dict[str, object]:
    """Apply the whole topic once, with one client, in one group of its own."""
    client = JournalClient(settings)
    consumed = 0

    def all_consumed() -> bool:
        nonlocal consumed
        batch = client.poll_batch()
        if batch:
            client.process(batch, datetime.now(tz=UTC))
            consumed += len(batch)
        return consumed >= messages

    wait_for(all_consumed, 60, "the clean pass")
    client.close()
    return stats_by_url(conn)


def test_a_crash_between_the_transaction_and_the_offset_commit_changes_nothing(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    clean: tuple[Settings, DictConnection, Context],
    tmp_path: Path,
) -> None:
    prepare(conn, ctx)
    messages = publish_visits(settings)
    env = with_constants({"actors.journal_consumer.BATCH_SIZE": 5}, {"PYTHONPATH": str(ROOT)})
    command = {"journal": [sys.executable, "-m", "app", "journal"]}
    crashing = {"journal": [sys.executable, "-m", journal_crash.__name__, "2"]}
    with running(crashing, env, tmp_path) as procs:
        wait_for(lambda: procs["journal"].poll() is not None, 60, "the crash", tmp_path)
    assert procs["journal"].returncode == journal_crash.EXIT_CODE
    crashed = stats_by_url(conn)
    assert any(r["last_visit_number"] for r in crashed.values())
    assert not all(r["last_visit_number"] == 3 for r in crashed.values())

    restart_logs = tmp_path / "restart"
    restart_logs.mkdir()
    with running(command, env, restart_logs):
        wait_for(
            lambda: all(r["last_visit_number"] == 3 for r in stats_by_url(conn).values()),
            60,
            "the restarted client to catch up",
            restart_logs,
        )
    clean_settings, clean_conn, _ = clean
    assert stats_by_url(conn) == clean_pass(clean_settings, clean_conn, messages)
    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []


def test_two_clients_in_one_group_share_the_partitions_and_agree_with_one(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    clean: tuple[Settings, DictConnection, Context],
) -> None:
    prepare(conn, ctx)
    clients = [JournalClient(settings), JournalClient(settings)]
    wait_for(
        lambda: all(c.poll_batch() == [] and c.consumer.assignment() for c in clients),
        30,
        "both clients to get partitions",
    )
    assignments = [{tp.partition for tp in c.consumer.assignment()} for c in clients]
    assert not assignments[0] & assignments[1]
    messages = publish_visits(settings)
    consumed = [0, 0]

    def all_consumed() -> bool:
        for i, client in enumerate(clients):
            batch = client.poll_batch()
            if batch:
                client.process(batch, datetime.now(tz=UTC))
                consumed[i] += len(batch)
        return sum(consumed) >= messages

    wait_for(all_consumed, 60, "the two clients to consume the topic")
    for client in clients:
        client.close()
    assert all(consumed)
    clean_settings, clean_conn, _ = clean
    assert stats_by_url(conn) == clean_pass(clean_settings, clean_conn, messages)
    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []


def test_the_client_reconnects_when_postgresql_drops_its_connection(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    prepare(conn, ctx)
    client = JournalClient(settings)
    publisher = StatusPublisher(settings)
    publisher.publish(URLS[0], "git", 1, "full", b"a" * 20, date=T0)

    def applied(url: str) -> bool:
        batch = client.poll_batch()
        if batch:
            client.process(batch, datetime.now(tz=UTC))
        return stats_by_url(conn)[url]["last_visit_number"] == 1

    wait_for(lambda: applied(URLS[0]), 30, "the first status")
    opened = client.connections.opened
    conn.execute(
        "select pg_terminate_backend(pid) from pg_stat_activity"
        " where datname = current_database() and pid <> pg_backend_pid()"
    )
    publisher.publish(URLS[1], "git", 1, "full", b"b" * 20, date=T0)
    wait_for(lambda: applied(URLS[1]), 30, "the status after the connection dropped")
    client.close()
    assert client.connections.opened == opened + 1  # the lost one, replaced once
