from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.db.connection import DictConnection
from app.db.listings import register_lister
from app.inputs.listing import ListedOriginIn
from app.services.context import Context
from app.services.listing import finish_listing, record_listed_origins, start_listing
from app.services.mirror_sync import check
from app.services.scheduling import schedule_step
from app.settings import Settings
from tests.integration.helpers import cli, pool_members

NOW = datetime(2026, 7, 1, tzinfo=UTC)


def rows(urls: list[str], **extra: object) -> list[tuple[int, ListedOriginIn]]:
    return [
        (i + 1, ListedOriginIn(url=u, visit_type="git", **extra))  # type: ignore[arg-type]
        for i, u in enumerate(urls)
    ]


def enabled(conn: DictConnection) -> set[str]:
    return {
        str(r["url"])
        for r in conn.execute("select url from listed_origins where enabled").fetchall()
    }


def mirrored(ctx: Context) -> int:
    return sum(ctx.mirror.sizes("git").values())


def full_listing(
    conn: DictConnection, ctx: Context, lister: object, urls: list[str], at: datetime
) -> int:
    started = start_listing(conn, lister, at)  # type: ignore[arg-type]
    record_listed_origins(conn, ctx, lister, rows(urls), at)  # type: ignore[arg-type]
    return finish_listing(conn, ctx, lister, started, at, full=True)  # type: ignore[arg-type]


def test_full_listing_disables_unseen_origins_and_reenables_returning_ones(
    conn: DictConnection, ctx: Context
) -> None:
    lister = register_lister(conn, "gitlab", "one", None)
    urls = [f"https://one.example/{i}" for i in range(6)]
    assert full_listing(conn, ctx, lister, urls, NOW) == 0
    assert full_listing(conn, ctx, lister, urls[:4], NOW + timedelta(hours=1)) == 2
    assert enabled(conn) == set(urls[:4])
    assert mirrored(ctx) == 4
    assert check(conn, ctx, "git", NOW + timedelta(hours=1)) == []
    full_listing(conn, ctx, lister, urls, NOW + timedelta(hours=2))
    assert enabled(conn) == set(urls)
    assert mirrored(ctx) == 6
    assert check(conn, ctx, "git", NOW + timedelta(hours=2)) == []


def test_incremental_listing_disables_nothing(conn: DictConnection, ctx: Context) -> None:
    lister = register_lister(conn, "gitlab", "one", None)
    urls = [f"https://one.example/{i}" for i in range(4)]
    record_listed_origins(conn, ctx, lister, rows(urls), NOW)
    started = start_listing(conn, lister, NOW + timedelta(hours=1))
    record_listed_origins(conn, ctx, lister, rows(urls[:1]), NOW + timedelta(hours=1))
    assert finish_listing(conn, ctx, lister, started, NOW, full=False) == 0
    assert enabled(conn) == set(urls)


def test_origin_another_lister_still_reports_stays_scheduled(
    conn: DictConnection, ctx: Context
) -> None:
    one = register_lister(conn, "gitlab", "one", None)
    two = register_lister(conn, "mirror", "two", None)
    url = "https://shared.example/x"
    full_listing(conn, ctx, one, [url], NOW)
    full_listing(conn, ctx, two, [url], NOW)
    full_listing(conn, ctx, one, [], NOW + timedelta(hours=1))
    assert mirrored(ctx) == 1
    full_listing(conn, ctx, two, [], NOW + timedelta(hours=1))
    assert mirrored(ctx) == 0
    assert check(conn, ctx, "git", NOW + timedelta(hours=1)) == []


def test_origin_disabled_after_failures_is_reenabled_by_the_next_listing(
    conn: DictConnection, ctx: Context
) -> None:
    lister = register_lister(conn, "gitlab", "one", None)
    url = "https://one.example/broken"
    record_listed_origins(conn, ctx, lister, rows([url]), NOW)
    conn.execute(
        "update origin_visit_stats set disabled_for_failures = true, failures_in_a_row = 3"
    )
    from app.services.mirror_sync import rebuild

    rebuild(conn, ctx, "git", NOW)
    assert mirrored(ctx) == 0
    record_listed_origins(conn, ctx, lister, rows([url]), NOW + timedelta(days=1))
    stats = conn.execute("select * from origin_visit_stats").fetchone()
    assert stats is not None
    assert (stats["disabled_for_failures"], stats["failures_in_a_row"]) == (False, 0)
    assert mirrored(ctx) == 1


def test_newer_last_update_moves_a_visited_origin_to_the_lagging_pool(
    conn: DictConnection, ctx: Context
) -> None:
    lister = register_lister(conn, "gitlab", "one", None)
    url = "https://one.example/active"
    record_listed_origins(conn, ctx, lister, rows([url], last_update=NOW - timedelta(days=9)), NOW)
    assert ctx.mirror.sizes("git")["never_visited"] == 1
    conn.execute(
        "update origin_visit_stats set last_successful = %s, last_snapshot = %s",
        (NOW - timedelta(days=5), b"s" * 20),
    )
    record_listed_origins(conn, ctx, lister, rows([url], last_update=NOW - timedelta(days=1)), NOW)
    assert ctx.mirror.sizes("git")["lagging"] == 1
    assert pool_members(ctx.mirror, "git", "lagging") == [(b"1", -4 * 86400)]
    assert check(conn, ctx, "git", NOW) == []


@pytest.mark.parametrize("policies", [None, {"stop_after_success": 1.0}])
def test_a_new_origin_that_keeps_changing_is_visited_before_origins_listed_after_it(
    conn: DictConnection, ctx: Context, policies: dict[str, float] | None
) -> None:
    lister = register_lister(conn, "gitlab", "one", None)
    active, later = "https://one.example/active", "https://one.example/later"
    record_listed_origins(conn, ctx, lister, rows([active], last_update=NOW), NOW)
    day = NOW + timedelta(days=1)
    # the next day's listing: a new origin, and the first one changed since
    listing = [
        (1, ListedOriginIn(url=active, visit_type="git", last_update=day)),
        (2, ListedOriginIn(url=later, visit_type="git", last_update=day - timedelta(hours=1))),
    ]
    record_listed_origins(conn, ctx, lister, listing, day)
    # the pools of the default policy, or a policy Postgres ranks
    picked = schedule_step(conn, ctx, "git", 1, day, policies).orders
    assert [o.url for o in picked] == [active]
    assert check(conn, ctx, "git", day) == []


def test_csv_import_reads_every_field(settings: Settings, conn: DictConnection) -> None:
    assert cli("lister", "register", "pypi", "main").returncode == 0
    text = (
        "url,visit_type,last_update,is_fork,forked_from_url,extra_loader_arguments\n"
        'https://p.example/a,git,2026-01-02T03:04:05Z,true,https://p.example/o,"{""depth"": 1}"\n'
        "https://p.example/b,hg,,,,\n"
    )
    result = cli("origins", "import", "-", "--csv", "--lister", "pypi/main", stdin=text)
    assert result.returncode == 0, result.stderr
    got = {
        r["url"]: r for r in conn.execute("select * from listed_origins order by url").fetchall()
    }
    a = got["https://p.example/a"]
    assert (a["is_fork"], a["forked_from_url"], a["extra_loader_arguments"]) == (
        True,
        "https://p.example/o",
        {"depth": 1},
    )
    assert a["last_update"] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert got["https://p.example/b"]["visit_type"] == "hg"


def test_a_bad_batch_is_refused_alone_and_a_full_listing_then_disables_nothing(
    settings: Settings, conn: DictConnection, tmp_path: Path
) -> None:
    assert cli("lister", "register", "gitlab", "one").returncode == 0
    first = "".join(f'{{"url": "https://g.example/{i}", "visit_type": "git"}}\n' for i in range(4))
    assert cli("origins", "import", "-", "--lister", "gitlab/one", stdin=first).returncode == 0
    listing = tmp_path / "listing.jsonl"
    listing.write_text(
        '{"url": "https://g.example/0", "visit_type": "git"}\n'
        '{"url": "https://g.example/1", "visit_type": "git"}\n'
        '{"url": "https://g.example/2", "visit_type": "git", "last_update": "yesterday"}\n'
        '{"url": "https://g.example/9", "visit_type": "git"}\n'
    )
    result = cli(
        "origins", "import", str(listing), "--lister", "gitlab/one", "--full", "--batch-size", "2"
    )
    assert result.returncode == 2
    assert "line 3: last_update" in result.stderr
    assert "unseen origins were not disabled" in result.stderr
    assert enabled(conn) == {f"https://g.example/{i}" for i in (0, 1, 2, 3)}


def test_unknown_lister_is_refused_before_anything_is_written(
    settings: Settings, conn: DictConnection
) -> None:
    result = cli(
        "origins",
        "import",
        "-",
        "--lister",
        "nobody/here",
        stdin='{"url": "https://a", "visit_type": "git"}\n',
    )
    assert result.returncode == 2
    assert "--lister: lister nobody/here is not registered" in result.stderr
    malformed = cli("origins", "import", "-", "--lister", "nobody", stdin="")
    assert malformed.returncode == 2 and "expected NAME/INSTANCE" in malformed.stderr


def test_concurrent_writers_record_every_origin_once_even_with_duplicates(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    from app.db.connection import connect
    from app.inputs.listing import batches
    from app.services.listing import import_listing

    lister = register_lister(conn, "gitlab", "big", None)
    lines = [f'{{"url": "https://w.example/{i % 700}", "visit_type": "git"}}' for i in range(1000)]
    extra = [connect(settings) for _ in range(2)]
    report = import_listing(
        conn, ctx, lister, batches(lines, 50, csv_format=False), lambda: NOW, extra
    )
    for c in extra:
        c.close()
    assert report.recorded == 1000 and not report.refused
    assert len(enabled(conn)) == 700
    assert mirrored(ctx) == 700
    assert check(conn, ctx, "git", NOW) == []


def test_active_origins_changed_between_the_previous_and_the_last_listing(
    conn: DictConnection, ctx: Context
) -> None:
    from monitoring.coverage import refresh_coverage

    lister = register_lister(conn, "gitlab", "active", None)
    first, second = NOW, NOW + timedelta(days=1)
    updates = {
        "https://a.example/before": NOW - timedelta(days=5),
        "https://a.example/between": NOW + timedelta(hours=12),
    }
    for at in (first, second):
        started = start_listing(conn, lister, at)
        rows = [
            (i + 1, ListedOriginIn(url=u, visit_type="git", last_update=when))
            for i, (u, when) in enumerate(updates.items())
        ]
        record_listed_origins(conn, ctx, lister, rows, at)
        finish_listing(conn, ctx, lister, started, at, full=True)
    rows = refresh_coverage(conn, second + timedelta(hours=1), 3600.0, 3600.0)
    assert [(r["lister"], r["origins_enabled"], r["origins_active"]) for r in rows] == [
        ("gitlab/active", 2, 1)
    ]


def test_an_origin_another_writer_inserts_during_a_batch_is_updated_by_the_batch(
    settings: Settings, conn: DictConnection, ctx: Context
) -> None:
    # The batch writes origins new at its snapshot by a plain insert: one that
    # another writer inserts meanwhile must end up upserted, not refused.
    import threading

    from app.db.connection import connect
    from app.db.listings import upsert_listed_origins
    from app.services.listing import place_recorded

    lister = register_lister(conn, "gitlab", "big", None)
    urls = ["https://w.example/a", "https://w.example/b"]
    outcome: list[object] = []

    def batch() -> None:
        with connect(settings) as writer:
            try:
                outcome.append(
                    record_listed_origins(writer, ctx, lister, rows(urls, is_fork=True), NOW)
                )
            except Exception as exc:
                outcome.append(exc)

    with connect(settings) as other:
        with other.transaction():
            first = ListedOriginIn(url=urls[1], visit_type="git", is_fork=False)
            changed = upsert_listed_origins(other, lister, [first], NOW)
            thread = threading.Thread(target=batch)
            thread.start()
            for _ in range(200):  # until the batch waits for this transaction
                waiting = conn.execute(
                    "select count(*) as n from pg_stat_activity where wait_event_type = 'Lock'"
                ).fetchone()
                if waiting is not None and waiting["n"]:
                    break
                thread.join(0.05)
            assert thread.is_alive()
        place_recorded(ctx, changed, NOW)
    thread.join(30)

    assert outcome == [2]
    stored = conn.execute("select url, is_fork from listed_origins order by url").fetchall()
    assert [(r["url"], r["is_fork"]) for r in stored] == [(u, True) for u in urls]
    assert conn.execute("select count(*) as n from origin_visit_stats").fetchone() == {"n": 2}
    assert mirrored(ctx) == 2
    assert check(conn, ctx, "git", NOW) == []
