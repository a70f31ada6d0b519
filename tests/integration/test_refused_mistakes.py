"""Operator mistakes are refused before they do harm: a non-zero exit, an error
naming the field, nothing written, and the mirror still equal to PostgreSQL."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.db.connection import DictConnection
from app.domain.queue_names import API_QUEUE
from app.services.context import Context
from app.services.mirror_sync import check
from app.settings import Settings
from queues.keys import DramatiqQueueKeys, queue_workers
from tests.integration.helpers import cli, free_port, list_origins, send_to_api
from tests.processes import running, wait_for

TABLES = ("listers", "listed_origins", "origin_visit_stats", "visit_requests")


def counts(conn: DictConnection) -> dict[str, int]:
    """Rows per table the commands under test may write."""
    return {
        table: int(conn.execute(f"select count(*) as n from {table}").fetchone()["n"])  # type: ignore[index]
        for table in TABLES
    }


def line(url: str, **fields: str) -> str:
    extra = "".join(f', "{k}": {v}' for k, v in fields.items())
    return f'{{"url": "{url}", "visit_type": "git"{extra}}}\n'


def mirror_clean(conn: DictConnection, ctx: Context) -> bool:
    return check(conn, ctx, "git", datetime.now(tz=UTC)) == []


@pytest.mark.parametrize(
    "weights",
    [
        ["never_visited_oldest_update_first=inf"],
        ["never_visited_oldest_update_first=1e308"],
        ["never_visited_oldest_update_first=nan"],
        ["never_visited_oldest_update_first=0", "origins_without_last_update=0"],
    ],
)
def test_absurd_policy_weights_are_refused_and_the_old_ones_kept(
    settings: Settings, conn: DictConnection, weights: list[str]
) -> None:
    before = conn.execute("select * from scheduling_policies order by 1, 2").fetchall()
    result = cli("policy", "set", "git", *weights)
    assert result.returncode == 2
    assert "error: weight" in result.stderr or "error: WEIGHTS" in result.stderr
    assert conn.execute("select * from scheduling_policies order by 1, 2").fetchall() == before


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (line("https://b.example/" + "x" * 100_000), "url: Value error, URL of 100018 bytes"),
        (line("https://b.example/\\u0000nul"), "url: Value error, URL holds a forbidden"),
        (
            line("https://b.example/n", extra_loader_arguments='{"a": "\\u0000"}'),
            "extra_loader_arguments: Value error, holds a NUL",
        ),
        (line("b.example/no-scheme"), "url: Value error, URL must start with a scheme"),
    ],
)
def test_a_value_postgres_would_refuse_refuses_its_batch_and_the_others_are_mirrored(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    tmp_path: Path,
    bad: str,
    field: str,
) -> None:
    assert cli("lister", "register", "forge", "one").returncode == 0
    good = "".join(line(f"https://g.example/{i}") for i in range(4))
    listing = tmp_path / "listing.jsonl"
    listing.write_text(good + bad + line("https://g.example/late"))
    before = counts(conn)
    result = cli("origins", "import", str(listing), "--lister", "forge/one", "--batch-size", "2")
    assert result.returncode == 2
    assert f"line 5: {field}" in result.stderr
    assert "Traceback" not in result.stderr
    after = counts(conn)
    # the two batches before the bad one are written, the bad batch is not
    assert after["origin_visit_stats"] - before["origin_visit_stats"] == 4
    assert sum(ctx.mirror.sizes("git").values()) == 4
    assert mirror_clean(conn, ctx)


def test_a_latin1_byte_is_refused_with_its_line(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    assert cli("lister", "register", "forge", "one").returncode == 0
    listing = tmp_path / "listing.jsonl"
    listing.write_bytes(
        line("https://g.example/ok").encode() + b'{"url": "https://g.example/\xe9"}\n'
    )
    before = counts(conn)
    result = cli("origins", "import", str(listing), "--lister", "forge/one")
    assert result.returncode == 2
    assert "line 2: (line): not UTF-8 text" in result.stderr
    assert counts(conn) == before
    assert mirror_clean(conn, ctx)


def test_a_csv_whose_only_line_is_data_is_refused(settings: Settings, conn: DictConnection) -> None:
    assert cli("lister", "register", "forge", "one").returncode == 0
    before = counts(conn)
    result = cli(
        "origins",
        "import",
        "-",
        "--csv",
        "--lister",
        "forge/one",
        stdin="https://c.example/a,git\n",
    )
    assert result.returncode == 2
    assert "line 1: (header): unknown column(s): https://c.example/a, git" in result.stderr
    assert counts(conn) == before


def test_an_empty_full_listing_disables_nothing_without_the_explicit_flag(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    assert cli("lister", "register", "forge", "one").returncode == 0
    urls = "".join(line(f"https://g.example/{i}") for i in range(4))
    assert cli("origins", "import", "-", "--lister", "forge/one", stdin=urls).returncode == 0
    refused = cli("origins", "import", "-", "--lister", "forge/one", "--full", stdin="")
    assert refused.returncode == 2
    assert "--full: the listing would disable 4 of the lister's 4 origins" in refused.stderr
    enabled = "select count(*) as n from listed_origins where enabled"
    assert conn.execute(enabled).fetchone()["n"] == 4  # type: ignore[index]
    assert sum(ctx.mirror.sizes("git").values()) == 4
    forced = cli(
        "origins",
        "import",
        "-",
        "--lister",
        "forge/one",
        "--full",
        "--allow-mass-disable",
        stdin="",
    )
    assert forced.returncode == 0, forced.stderr
    assert "disabled 4 origins" in forced.stdout
    assert conn.execute(enabled).fetchone()["n"] == 0  # type: ignore[index]
    assert mirror_clean(conn, ctx)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["request", "add", "https://r.example/a", "--kind", "bogus"], "kind: Input should be"),
        (["request", "add", "https://r.example/\x01"], "url: Value error, URL holds"),
        (["request", "adjust", "1", "+100000000000"], "Invalid value for 'delta'"),
        (["request", "adjust", "1", "900"], "delta: priority 500 +900 is outside -1000..1000"),
        (["origin", "show", "https://r.example/a", "--visit-type", "zzz"], "--visit-type: unknown"),
    ],
)
def test_bad_request_and_origin_arguments_are_refused(
    settings: Settings, conn: DictConnection, args: list[str], message: str
) -> None:
    assert cli("request", "add", "https://r.example/a", "--priority", "500").returncode == 0
    before = conn.execute("select * from visit_requests").fetchall()
    result = cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert conn.execute("select * from visit_requests").fetchall() == before


def test_a_negative_adjustment_needs_no_double_dash(
    settings: Settings, conn: DictConnection
) -> None:
    assert cli("request", "add", "https://r.example/a").returncode == 0
    result = cli("request", "adjust", "1", "-5")
    assert result.returncode == 0, result.stderr
    assert "priority -5" in result.stdout


def test_record_listing_refuses_a_bad_payload_before_writing_anything(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    assert cli("lister", "register", "forge", "one").returncode == 0
    origin = {"url": "https://api.example/a", "visit_type": "git"}
    lister = {"lister_name": "forge", "instance_name": "one"}
    bad = [
        {"lister_name": "unknown", "instance_name": "x", "origins": [origin]},
        {**lister, "origins": [origin], "full": True, "listing_started_at": math.nan},
        {**lister, "origins": [origin], "full": True, "listing_started_at": 1e20},
        {**lister, "origins": [{"url": "https://api.example/b", "visit_type": "Z Z"}]},
    ]
    good = {**lister, "origins": [{"url": "https://api.example/good", "visit_type": "git"}]}
    send_to_api(settings, "record_listing", [*bad, good])
    logs = tmp_path / "logs"
    logs.mkdir()
    dead = DramatiqQueueKeys("dramatiq", API_QUEUE).dead
    with running({"api": ["revisit", "api"]}, {}, logs):
        wait_for(lambda: ctx.redis.zcard(dead) == len(bad), 30, "bad messages dead-lettered", logs)
        wait_for(lambda: counts(conn)["listed_origins"] == 1, 30, "the good listing", logs)
    assert counts(conn) == {
        "listers": 1,
        "listed_origins": 1,
        "origin_visit_stats": 1,
        "visit_requests": 0,
    }
    log = (logs / "api.log").read_text()
    for message in (
        "lister_name/instance_name: lister unknown/x is not registered",
        "listing_started_at: Input should be a finite number",
        "listing_started_at: Input should be less than or equal to",
        "visit_type: Value error, 'Z Z' cannot name a visit type",
    ):
        assert message in log
    assert mirror_clean(conn, ctx)


def scheduled(conn: DictConnection) -> int:
    """Origins stamped scheduled."""
    query = "select count(*) as n from origin_visit_stats where last_scheduled is not null"
    return int(conn.execute(query).fetchone()["n"])  # type: ignore[index]


def test_a_dry_run_on_an_empty_redis_writes_nothing_and_says_what_would_happen(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [f"https://d.example/{i}" for i in range(5)])
    ctx.redis.flushdb()
    result = cli("schedule", "--dry-run", "git", "-n", "5")
    assert result.returncode == 0, result.stderr
    assert "the mirror of git is missing" in result.stdout
    assert "`revisit mirror rebuild git`" in result.stdout
    assert ctx.redis.dbsize() == 0
    assert scheduled(conn) == 0


def test_schedule_with_the_broker_down_names_its_setting_and_stamps_nothing(
    settings: Settings, conn: DictConnection, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_origins(conn, ctx, [f"https://b.example/{i}" for i in range(5)])
    monkeypatch.setenv("REVISIT_BROKER_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    result = cli("schedule", "git", "-n", "5")
    assert result.returncode == 3
    assert "cannot reach the broker Redis at 127.0.0.1:" in result.stderr
    assert "(set REVISIT_BROKER_REDIS_URL)" in result.stderr
    assert "nothing was scheduled" in result.stderr
    assert "Traceback" not in result.stderr
    assert scheduled(conn) == 0
    assert ctx.mirror.sizes("git")["inflight"] == 0
    assert mirror_clean(conn, ctx)


def test_schedule_sends_at_most_the_visit_types_max_queue_length(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [f"https://n.example/{i}" for i in range(10)])
    assert cli("visit-type", "set", "git", "--max-queue-length", "3").returncode == 0
    result = cli("schedule", "git", "-n", "100000000")
    assert result.returncode == 0, result.stderr
    assert "-n 100000000: capped at git's max_queue_length, 3" in result.stdout
    assert "sent 3 visits of git" in result.stdout
    assert scheduled(conn) == 3


@pytest.mark.parametrize(
    ("last_update", "message"),
    [
        ('"0001-01-01T00:00:00Z"', "0001-01-01T00:00:00+00:00 is before 1970-01-01"),
        ('"1969-12-31T23:59:59Z"', "1969-12-31T23:59:59+00:00 is before 1970-01-01"),
        ('"9999-12-31T00:00:00Z"', "9999-12-31T00:00:00+00:00 is more than 1 day past now"),
        ("-1", "1969-12-31T23:59:59+00:00 is before 1970-01-01"),
    ],
)
def test_a_last_update_before_1970_or_past_tomorrow_refuses_its_batch(
    settings: Settings,
    conn: DictConnection,
    ctx: Context,
    tmp_path: Path,
    last_update: str,
    message: str,
) -> None:
    assert cli("lister", "register", "forge", "one").returncode == 0
    listing = tmp_path / "listing.jsonl"
    listing.write_text(
        line("https://g.example/1970", last_update='"1970-01-01T00:00:00Z"')
        + line("https://g.example/today", last_update=str(int(datetime.now(tz=UTC).timestamp())))
        + line("https://g.example/bad", last_update=last_update)
    )
    result = cli("origins", "import", str(listing), "--lister", "forge/one", "--batch-size", "2")
    assert result.returncode == 2
    assert f"line 3: last_update: {message}" in result.stderr
    assert counts(conn)["listed_origins"] == 2  # the first batch
    assert mirror_clean(conn, ctx)


def test_the_demo_refuses_configured_services_unless_told(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    result = cli("demo", "--repos", "2", "--duration", "1")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: REVISIT_DATABASE_URL, REVISIT_REDIS_URL, REVISIT_KAFKA_BROKERS set: the demo "
    )
    assert "--use-configured-services" in result.stderr
    assert counts(conn) == dict.fromkeys(TABLES, 0)
    assert conn.execute("select count(*) as n from lister_schedules").fetchone() == {"n": 0}


def test_a_request_no_worker_would_serve_is_recorded_with_a_warning(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    alone = cli("request", "add", "https://w.example/a")
    assert alone.returncode == 0, alone.stderr
    assert "warning: no worker serves visit.git.priority now" in alone.stderr
    registry = queue_workers(settings.redis_namespace, "visit.git.priority")
    ctx.redis.hset(registry, "host:1", f"2|{time.time()}")  # a priority worker, 2 threads
    served = cli("origins", "send", "https://w.example/b", "--visit-type", "git")
    assert served.returncode == 0, served.stderr
    assert "warning" not in served.stderr
    assert counts(conn)["visit_requests"] == 2
