"""The one PostgreSQL connection policy (app.db.connection.Connections), on a real server."""

from __future__ import annotations

from pathlib import Path

from app.client import RevisitClient
from app.db.connection import Connections, DictConnection
from app.settings import Settings
from tests.processes import running, wait_for


def backend_pid(connections: Connections) -> int:
    with connections.borrow() as conn:
        row = conn.execute("select pg_backend_pid() as pid").fetchone()
    assert row is not None
    return int(row["pid"])


def cut_other_sessions(conn: DictConnection) -> None:
    conn.execute(
        "select pg_terminate_backend(pid) from pg_stat_activity"
        " where datname = current_database() and pid <> pg_backend_pid()"
    )


def test_a_connection_is_kept_from_one_borrow_to_the_next(settings: Settings) -> None:
    connections = Connections(settings)
    try:
        assert backend_pid(connections) == backend_pid(connections)
        assert connections.opened == 1
    finally:
        connections.close()


def test_a_connection_postgresql_dropped_while_idle_is_replaced_at_the_next_borrow(
    settings: Settings, conn: DictConnection
) -> None:
    connections = Connections(settings)
    try:
        first = backend_pid(connections)
        cut_other_sessions(conn)
        assert backend_pid(connections) != first
        assert connections.opened == 2
    finally:
        connections.close()


def test_a_connection_left_inside_a_transaction_is_not_lent_again(settings: Settings) -> None:
    connections = Connections(settings)
    try:
        with connections.borrow() as left:
            left.execute("begin")
            first = int(left.info.backend_pid)
        assert left.closed
        assert backend_pid(connections) != first
    finally:
        connections.close()


def test_the_api_process_keeps_its_connections_across_messages_and_survives_losing_them(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    client = RevisitClient.from_settings(settings)

    def send(first: int, count: int) -> None:
        for i in range(first, first + count):
            client.request_visit(url=f"https://keep.example/r{i}", visit_type="git", priority=1)

    def recorded() -> int:
        row = conn.execute("select count(*) as n from visit_requests").fetchone()
        return int(row["n"]) if row else 0

    def api_sessions() -> int:
        row = conn.execute(
            "select count(*) as n from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
        ).fetchone()
        return int(row["n"]) if row else 0

    logs = tmp_path / "logs"
    logs.mkdir()
    with running({"api": ["revisit", "api", "--threads", "2"]}, {}, logs):
        send(0, 20)
        wait_for(lambda: recorded() == 20, 60, "the first requests recorded", logs)
        assert 1 <= api_sessions() <= 2  # one per thread, still open between messages
        cut_other_sessions(conn)
        send(20, 20)
        wait_for(lambda: recorded() == 40, 60, "the requests after the cut recorded", logs)
        assert 1 <= api_sessions() <= 2


def test_work_postgresql_aborts_for_a_deadlock_is_retried_at_once_as_a_conflict(
    settings: Settings,
) -> None:
    connections = Connections(settings)
    causes: list[str] = []
    attempts: list[int] = []

    def work(conn: DictConnection) -> int:
        attempts.append(1)
        if len(attempts) == 1:
            # what PostgreSQL raises for a deadlock (SQLSTATE 40P01), caught for real
            conn.execute("do $$ begin raise exception using errcode = '40P01'; end $$")
        return len(attempts)

    try:
        done = connections.run(work, wait=lambda delay_s: True, on_retry=causes.append)
    finally:
        connections.close()
    assert (done, causes) == (2, ["conflict"])
