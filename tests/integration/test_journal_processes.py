"""``revisit journal --processes 2`` (the Procfile's journal) against the real
services: two client processes in one consumer group apply what one would,
one /metrics endpoint serves their sum, and the supervisor stops with them."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
import redis
from pydantic import SecretStr

from actors.journal import JournalClient
from app.db.connection import DictConnection, connect
from app.devtools import embedded
from app.kafka.client import StatusPublisher, ensure_topics, topic_partitions
from app.services.context import Context
from app.settings import Settings
from tests.conftest import fresh_database
from tests.integration.helpers import list_origins, stats_by_url
from tests.integration.test_journal_broker import EXIT_BOUND_S, scrape
from tests.integration.test_journal_client import drain
from tests.processes import BIN, wait_for

URLS = [f"https://group.example/r{i}.git" for i in range(30)]
T0 = datetime(2026, 3, 1, tzinfo=UTC)
#: Every partition of the journal topic (app.kafka.client.ensure_topics).
PARTITIONS = 4


def journal_group(logdir: Path, metrics_port: int) -> subprocess.Popen[bytes]:
    """``revisit journal --processes 2`` as the Procfile starts it."""
    env = {**os.environ, "REVISIT_METRICS_PORT": str(metrics_port)}
    log = (logdir / "journal.log").open("wb")
    return subprocess.Popen(
        [str(BIN / "revisit"), "journal", "--processes", "2"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


ASSIGNED = re.compile(r"revisit\.journal\[(\d+)\] INFO assigned partitions \[([\d, ]*)\]")

APPLIED = re.compile(r"revisit\.journal\[(\d+)\] INFO applied [1-9]")


def assignments(logdir: Path, port: int) -> list[int]:
    """Partitions owned by each client, as their last assignments logged say, once
    the group's endpoint counts every partition assigned (the broker under test
    does not describe consumer groups)."""
    try:
        if scrape(port).get("revisit_journal_assigned_partitions") != PARTITIONS:
            return []
    except OSError:
        return []
    last = dict(ASSIGNED.findall((logdir / "journal.log").read_text(errors="replace")))
    return sorted(len([p for p in owned.split(",") if p.strip()]) for owned in last.values())


@pytest.fixture
def group(settings: Settings, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The journal group started, once both clients own two partitions each; killed
    (with its children) if a test leaves it running."""
    port = embedded.free_port()
    proc = journal_group(tmp_path, port)
    try:
        wait_for(lambda: assignments(tmp_path, port) == [2, 2], 60, "both assigned", tmp_path)
        yield proc, port
    finally:
        children = psutil.Process(proc.pid).children() if proc.poll() is None else []
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for child in children:
            child.kill()


def children(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    found = psutil.Process(proc.pid).children()
    assert len(found) == 2, found
    return found


def publish_visits(settings: Settings) -> int:
    """Three visits of every origin, one failed; the number of messages."""
    publisher = StatusPublisher(settings)
    for visit in (1, 2, 3):
        for i, url in enumerate(URLS):
            date = T0 + timedelta(minutes=visit, seconds=i)
            publisher.publish(url, "git", visit, "created", None, date=date)
            if (visit + i) % 4 == 0:
                publisher.publish(url, "git", visit, "failed", None, date=date)
            else:
                publisher.publish(url, "git", visit, "full", bytes([visit, i % 2]) * 10, date=date)
    return 3 * 2 * len(URLS)


@pytest.fixture
def second_database(service_env: dict[str, str], template_dsn: str) -> Iterator[str]:
    """Another fresh database, for what one process makes of the same messages."""
    with fresh_database(service_env["REVISIT_DATABASE_URL"]) as url:
        yield url


def one_process(
    settings: Settings, database_url: str, redis_url: str
) -> dict[str, dict[str, object]]:
    """The stats one journal client makes of the whole topic, on a database and a
    Redis database of its own."""
    mirror = redis_url.rsplit("/", 1)[0] + "/1"
    redis.Redis.from_url(mirror).flushdb()
    alone = settings.model_copy(
        update={
            "database_url": SecretStr(database_url),
            "redis_url": SecretStr(mirror),
            "journal_group_id": settings.journal_group_id + "-alone",
        }
    )
    with connect(alone) as conn:
        list_origins(conn, Context.from_settings(alone), URLS, now=T0)
        client = JournalClient(alone)
        drain(client, lambda: _all_final(conn))
        client.close()
        stats = stats_by_url(conn)
    redis.Redis.from_url(mirror).flushdb()
    return stats


def _all_final(conn: DictConnection) -> bool:
    rows = stats_by_url(conn).values()
    return len(rows) == len(URLS) and all(r["last_visit_number"] == 3 for r in rows)


def comparable(stats: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """The stats but for when the anchor was taken: the scheduler's queue position
    when an origin's newest visit was first applied, which moves with the clock
    between two runs (one process applying the topic twice would differ too)."""
    return {
        url: {**row, "next_visit_anchor": row["next_visit_anchor"] is not None}
        for url, row in stats.items()
    }


def messages_applied(port: int) -> float:
    samples = scrape(port)
    return sum(v for k, v in samples.items() if k.startswith("revisit_journal_messages_total["))


def test_two_journal_processes_apply_every_status_as_one_does_and_one_endpoint_sums_them(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    group: tuple[subprocess.Popen[bytes], int],
    second_database: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    proc, port = group
    list_origins(conn, ctx, URLS, now=T0)

    sent = publish_visits(settings)

    wait_for(lambda: _all_final(conn), 60, "every status applied", tmp_path)
    wait_for(lambda: messages_applied(port) == sent, 30, "every status counted", tmp_path)
    samples = scrape(port)
    assert samples["revisit_journal_assigned_partitions"] == PARTITIONS
    lags = {k: v for k, v in samples.items() if k.startswith("revisit_journal_consumer_lag")}
    assert lags == {f"revisit_journal_consumer_lag[('partition', '{p}')]": 0 for p in range(4)}
    assert samples["revisit_journal_batch_messages_sum"] == sent
    assert not any(k.startswith("revisit_scheduler") for k in samples)
    assert proc.poll() is None
    applied_by = set(APPLIED.findall((tmp_path / "journal.log").read_text(errors="replace")))
    assert len(applied_by) == 2, "each client applied a share"
    assert comparable(stats_by_url(conn)) == comparable(
        one_process(settings, second_database, redis_url)
    )


def test_sigterm_stops_both_journal_processes_cleanly(
    group: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    proc, _ = group
    clients = children(proc)

    proc.send_signal(signal.SIGTERM)

    assert proc.wait(EXIT_BOUND_S) == 0, (tmp_path / "journal.log").read_text()[-3000:]
    assert not any(c.is_running() for c in clients)


def test_a_journal_process_killed_makes_the_group_exit_non_zero(
    group: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    proc, _ = group
    killed, other = children(proc)

    killed.send_signal(signal.SIGKILL)

    assert proc.wait(EXIT_BOUND_S) != 0
    assert not other.is_running()
    assert "exited (killed by SIGKILL) unbidden" in (tmp_path / "journal.log").read_text()


#: Kill-and-restart rounds of the rejoin reproduction (issue 33); unset: skipped,
#: since a round that hits the fault lasts minutes. About one round in seven hits it.
REJOIN_ROUNDS = int(os.environ.get("REVISIT_TEST_REJOIN_ROUNDS", "0"))
#: How long a restarted group may take to apply a status (it takes 2-5 s when the
#: group forms, against 200 s and more when it does not).
REJOIN_BOUND_S = 60


# Fails on tansu 0.6.0 (about one round in seven): it keeps a group leader killed
# between JoinGroup and SyncGroup, and the restarted members get
# REBALANCE_IN_PROGRESS for minutes (issue 33; README, "Journal restarts").
@pytest.mark.skipif(not REJOIN_ROUNDS, reason="set REVISIT_TEST_REJOIN_ROUNDS to run it")
@pytest.mark.timeout(0)
def test_a_journal_group_killed_while_it_joins_applies_statuses_soon_after_its_restart(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    list_origins(conn, ctx, URLS, now=T0)
    publisher = StatusPublisher(settings)
    rng = random.Random(1)
    for round_ in range(REJOIN_ROUNDS):
        killed_dir, restarted_dir = tmp_path / f"killed{round_}", tmp_path / f"restarted{round_}"
        killed_dir.mkdir()
        restarted_dir.mkdir()
        # Killed while its members join the group (they take 2-4 s to be assigned).
        killed = journal_group(killed_dir, embedded.free_port())
        time.sleep(rng.uniform(1.5, 3.5))
        while len(psutil.Process(killed.pid).children()) < 2:
            time.sleep(0.1)
        rng.choice(children(killed)).send_signal(signal.SIGKILL)
        killed.wait(EXIT_BOUND_S)
        restarted = journal_group(restarted_dir, embedded.free_port())
        try:
            url = URLS[round_ % len(URLS)]
            date = T0 + timedelta(minutes=round_)
            publisher.publish(url, "git", round_ + 1, "full", b"r" * 20, date=date)
            wait_for(
                lambda url=url, visit=round_ + 1: (
                    stats_by_url(conn).get(url, {}).get("last_visit_number") == visit
                ),
                REJOIN_BOUND_S,
                f"the status of round {round_} applied",
                restarted_dir,
            )
        finally:
            group = psutil.Process(restarted.pid)
            for process in [group, *group.children()]:
                process.send_signal(signal.SIGKILL)
            restarted.wait(EXIT_BOUND_S)


def test_more_journal_processes_than_partitions_are_reported_idle(
    settings: Settings, tmp_path: Path
) -> None:
    ensure_topics(settings, partitions=1)
    proc = journal_group(tmp_path, embedded.free_port())
    log = tmp_path / "journal.log"
    try:
        wait_for(
            lambda: "will hold no partition" in log.read_text(errors="replace"),
            60,
            "the idle warning",
            tmp_path,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(EXIT_BOUND_S)
    assert (
        f"2 journal processes for the 1 partition of {settings.journal_topic}: 1 will hold "
        "no partition" in log.read_text()
    )


def test_the_partitions_of_a_topic_are_read_from_the_broker(settings: Settings) -> None:
    ensure_topics(settings)

    assert topic_partitions(settings, settings.journal_topic) == PARTITIONS
    assert topic_partitions(settings, f"{settings.journal_topic}-never-created") == 0
    gone = settings.model_copy(update={"kafka_brokers": f"127.0.0.1:{embedded.free_port()}"})
    assert topic_partitions(gone, settings.journal_topic, timeout_s=1.0) is None
