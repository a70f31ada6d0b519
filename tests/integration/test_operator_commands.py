"""Operator commands against real PostgreSQL and Redis: visit types, disabling
origins, visits on demand, scheduling by hand, the version, unreachable services."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import redis

from app.db.connection import DictConnection
from app.services.context import Context
from app.services.mirror_sync import check
from app.settings import Settings
from queues.keys import DramatiqQueueKeys
from tests.integration.helpers import cli, list_origins


def mirrored(ctx: Context) -> int:
    return sum(ctx.mirror.sizes("git").values())


def test_version_is_printed() -> None:
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("revisit ")


def test_visit_type_add_list_set_and_refusals(settings: Settings, conn: DictConnection) -> None:
    added = cli("visit-type", "add", "simulated", "--min-interval", "1h", "--max-queue-length", "5")
    assert added.returncode == 0, added.stderr
    assert "running workers serve it once restarted" in added.stdout
    row = conn.execute(
        "select extract(epoch from min_interval) as lo, max_queue_length from visit_types "
        "where name = 'simulated'"
    ).fetchone()
    assert row == {"lo": 3600, "max_queue_length": 5}
    policies = conn.execute(
        "select policy, weight from scheduling_policies where visit_type = 'simulated'"
    ).fetchall()
    assert policies == [{"policy": "age_optimal", "weight": 1.0}]  # the project's default
    assert cli("visit-type", "set", "simulated", "--max-interval", "30d").returncode == 0
    listed = cli("visit-type", "list")
    assert listed.returncode == 0
    line = next(x for x in listed.stdout.splitlines() if "simulated" in x)
    assert "1h" in line and "30d" in line and " 5 " in line
    before = conn.execute("select * from visit_types order by name").fetchall()
    for args, message in [
        (("add", "git"), "name: visit type 'git' already exists"),
        (("add", "Bad.Name"), "'Bad.Name' cannot name a visit type"),
        (("add", "x", "--min-interval", "soon"), "--min-interval: expected a duration"),
        (("set", "simulated", "--min-interval", "60d"), "min_interval_s: 5.184e+06 would be"),
        (("set", "simulated", "--min-interval", "1s"), "min_interval_s: Input should be greater"),
        (("add", "x", "--min-interval", "59m"), "than or equal to 3600"),
        (("set", "nope", "--max-queue-length", "3"), "name: no visit type 'nope'"),
        (("set", "git", "--max-queue-length", "0"), "max_queue_length: Input should be"),
    ]:
        result = cli("visit-type", *args)
        assert result.returncode == 2, args
        assert message in result.stderr, (args, result.stderr)
    assert conn.execute("select * from visit_types order by name").fetchall() == before


def test_a_visit_type_an_import_reports_is_created_paused_listed_and_enabled_by_hand(
    settings: Settings, conn: DictConnection
) -> None:
    assert cli("lister", "register", "maven", "central").returncode == 0
    lines = '{"url": "https://m.example/a", "visit_type": "maven"}\n'
    imported = cli("origins", "import", "-", "--lister", "maven/central", stdin=lines)
    assert imported.returncode == 0, imported.stderr
    added = cli("visit-type", "add", "svn-export")
    assert added.returncode == 0, added.stderr
    assert "no loader svn-export is installed: its visits would fail" in added.stdout
    listed = cli("visit-type", "list", env={"COLUMNS": "300"})
    maven = next(x for x in listed.stdout.splitlines() if "maven" in x)
    assert "no (paused: set --enable)" in maven and " 1 " in maven  # its origin counted
    assert "svn-export" in listed.stdout
    again = cli("visit-type", "add", "maven")
    assert again.returncode == 2 and "--enable" in again.stderr
    assert cli("visit-type", "set", "maven", "--enable").returncode == 0
    rows = conn.execute(
        "select name, enabled from visit_types where name in ('maven', 'svn-export') order by name"
    ).fetchall()
    assert rows == [{"name": "maven", "enabled": True}, {"name": "svn-export", "enabled": True}]


def test_a_disabled_origin_leaves_the_mirror_and_a_listing_does_not_bring_it_back(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    urls = ["https://d.example/a", "https://d.example/b"]
    list_origins(conn, ctx, urls)
    assert mirrored(ctx) == 2
    result = cli("origin", "disable", urls[0])
    assert result.returncode == 0, result.stderr
    assert "disabled" in result.stdout
    assert mirrored(ctx) == 1
    list_origins(conn, ctx, urls)
    assert mirrored(ctx) == 1
    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []
    shown = cli("origin", "show", urls[0]).stdout
    assert re.search(r"disabled_by_operator\s+│ True", shown)
    assert cli("origin", "enable", urls[0]).returncode == 0
    assert mirrored(ctx) == 2
    assert check(conn, ctx, "git", datetime.now(tz=UTC)) == []
    unknown = cli("origin", "disable", "https://d.example/zzz")
    assert unknown.returncode == 1 and "URL: no origin" in unknown.stderr


def test_origins_send_makes_one_request_per_origin_or_none(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, ["https://s.example/a", "https://s.example/b"])
    refused = cli("origins", "send", "https://s.example/a", "https://s.example/unknown")
    assert refused.returncode == 2
    assert "URL: 'https://s.example/unknown' is not a known origin" in refused.stderr
    assert conn.execute("select count(*) as n from visit_requests").fetchone() == {"n": 0}
    sent = cli("origins", "send", "https://s.example/a", "https://s.example/b", "--priority", "9")
    assert sent.returncode == 0, sent.stderr
    rows = conn.execute(
        "select url, visit_type, kind, base_priority from visit_requests order by url"
    ).fetchall()
    assert rows == [
        {"url": u, "visit_type": "git", "kind": "operator", "base_priority": 9}
        for u in ("https://s.example/a", "https://s.example/b")
    ]


def test_schedule_without_dry_run_sends_the_visits_to_the_queues(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [f"https://q.example/{i}" for i in range(5)])
    result = cli("schedule", "git", "-n", "2")
    assert result.returncode == 0, result.stderr
    assert "sent 2 visits of git" in result.stdout
    r = redis.Redis.from_url(settings.redis_dsn())
    lanes = [DramatiqQueueKeys("dramatiq", f"visit.git.{lane}") for lane in ("express", "slow")]
    queued = sum(r.hlen(lane.messages) for lane in lanes)
    assert queued == 2
    assert ctx.mirror.sizes("git")["inflight"] == 2


def cli_with(variable: str, value: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``revisit ARGS`` with one REVISIT_* variable changed."""
    saved = os.environ.get(variable)
    os.environ[variable] = value
    try:
        return cli(*args)
    finally:
        if saved is None:
            del os.environ[variable]
        else:
            os.environ[variable] = saved


def test_an_unreachable_service_is_one_line_naming_the_setting(
    settings: Settings, conn: DictConnection
) -> None:
    bad_database = "postgresql://u:s3cret@127.0.0.1:1/x"
    result = cli_with("REVISIT_DATABASE_URL", bad_database, "request", "list")
    assert result.returncode == 3
    assert result.stderr.startswith("error: cannot reach PostgreSQL at 127.0.0.1:1/x")
    assert "REVISIT_DATABASE_URL" in result.stderr
    assert "s3cret" not in result.stderr and "Traceback" not in result.stderr
    bad_redis = "redis://:s3cret@127.0.0.1:1/0"
    result = cli_with("REVISIT_REDIS_URL", bad_redis, "mirror", "rebuild")
    assert result.returncode == 3
    assert "cannot reach Redis at 127.0.0.1:1/0 (set REVISIT_REDIS_URL)" in result.stderr
    assert "s3cret" not in result.stderr


def test_status_shows_pools_flight_queues_and_requests_of_each_visit_type(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    list_origins(conn, ctx, [f"https://v.example/{i}" for i in range(5)])
    assert cli("schedule", "git", "-n", "2").returncode == 0
    first = cli("request", "add", "https://v.example/0").stdout.strip()
    assert cli("request", "add", "https://v.example/1", "--after", first).returncode == 0
    result = cli("status", "--once")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("│ git"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    # never visited, lagging, no last update, up to date, in flight, cooling,
    # express, slow, priority queues, visits/s, failed, requests, drift, dead
    assert cells[1:7] == ["0", "0", "3", "0", "2", "0"]
    assert cells[7] == "2+0 /0t"
    assert cells[12] == "1/1/0/0"  # blocked/pending/scheduled/running
    assert cells[14] == "0"
    assert "3 origins waiting in pools" in result.stdout


def test_a_taken_metrics_or_rpc_port_is_refused_naming_the_setting(settings: Settings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        setting = "REVISIT_METRICS_PORT"
        for command in ("scheduler", "journal", "worker", "rpc"):
            result = cli_with(setting, port, command)
            assert result.returncode == 2, (command, result.stderr)
            assert f"{setting}: cannot serve metrics on 127.0.0.1:{port}" in result.stderr
        rpc = cli_with("REVISIT_RPC_PORT", port, "rpc")
        assert rpc.returncode == 2
        assert rpc.stderr.strip() == (
            f"error: REVISIT_RPC_PORT: cannot serve the RPC on 127.0.0.1:{port} (Address "
            "already in use); choose a free port"
        )


def test_settings_come_from_a_file_beneath_the_environment(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    conn.execute("insert into visit_types (name) values ('simulated')")
    config = tmp_path / "revisit.toml"
    config.write_text(
        'worker_visit_types_allow = ["git", "simulated"]\nredis_namespace = "fromfile"\n'
    )
    del os.environ["REVISIT_WORKER_VISIT_TYPES_ALLOW"]  # the test's environment sets it
    try:
        listed = cli("--config", str(config), "visit-type", "list")
    finally:
        os.environ["REVISIT_WORKER_VISIT_TYPES_ALLOW"] = '["git"]'
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if "│ simulated" in x)
    cells = [c.strip() for c in line.strip("│").split("│")]
    assert cells[:8] == ["simulated", "12h", "64d", "1000", "0", "yes", "yes", "simulated"]
    config.write_text('rpc_port = "many"\n')
    bad = cli("--config", str(config), "visit-type", "list")
    assert bad.returncode == 3
    assert "settings: rpc_port: Input should be a valid integer" in bad.stderr
    missing = cli("--config", str(tmp_path / "none.toml"), "visit-type", "list")
    assert missing.returncode == 3 and "REVISIT_CONFIG: no settings file" in missing.stderr
