"""The lister interface (the reference's semantics) against real PostgreSQL and Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.db.connection import DictConnection
from app.listers.interface import ListerInterface
from app.listers.models import ListerInputError, StaleData
from app.listers.tasks import TaskInterface
from app.services.context import Context

NOW = datetime(2026, 7, 1, tzinfo=UTC)


@pytest.fixture
def api(conn: DictConnection, ctx: Context) -> ListerInterface:
    return ListerInterface(conn, ctx, lambda: NOW)


def origin(lister_id: object, url: str, visit_type: str = "git", **extra: Any) -> dict[str, Any]:
    return {"lister_id": lister_id, "url": url, "visit_type": visit_type, **extra}


def test_get_or_create_returns_the_same_lister_and_an_absent_instance_is_empty(
    api: ListerInterface,
) -> None:
    first = api.get_or_create_lister("gitlab", "framagit", first_visits_queue_prefix="first")
    again = api.get_or_create_lister("gitlab", "framagit")
    bare = api.get_or_create_lister("cgit")
    assert again == first
    assert first.first_visits_queue_prefix == "first"
    assert bare.instance_name == ""
    assert api.get_lister("cgit") == bare
    assert api.get_lister("nothing", "here") is None
    assert [lst.name for lst in api.get_listers()] == ["gitlab", "cgit"]  # creation order
    assert api.get_listers_by_id([str(first.id)]) == [first]


def test_update_lister_writes_the_state_and_refuses_a_stale_stamp(api: ListerInterface) -> None:
    lister = api.get_or_create_lister("gitlab", "framagit")
    updated = api.update_lister(lister.model_copy(update={"current_state": {"page": 3}}))
    assert updated.current_state == {"page": 3}
    assert updated.updated is not None and lister.updated is not None
    assert updated.updated > lister.updated
    with pytest.raises(StaleData):
        api.update_lister(lister.model_copy(update={"current_state": {"page": 1}}))
    with pytest.raises(ListerInputError, match=r"lister\.current_state: .*not representable"):
        api.update_lister({**updated.model_dump(), "current_state": {"raw": b"\x01"}})
    assert api.get_lister("gitlab", "framagit") == updated


def test_recording_origins_keeps_the_stamp_update_lister_checks(api: ListerInterface) -> None:
    lister = api.get_or_create_lister("gitlab", "framagit")
    api.record_listed_origins([origin(lister.id, "https://f.example/a.git")])
    finished = lister.model_copy(
        update={"last_listing_finished_at": NOW, "current_state": {"x": 1}}
    )
    assert api.update_lister(finished).last_listing_finished_at == NOW


def test_record_upserts_moves_last_seen_and_places_new_origins_in_the_mirror(
    conn: DictConnection, ctx: Context
) -> None:
    lister_id = ListerInterface(conn, ctx, lambda: NOW).get_or_create_lister("g", "i").id
    first = ListerInterface(conn, ctx, lambda: NOW).record_listed_origins(
        [origin(lister_id, "https://f.example/a.git"), origin(lister_id, "https://f.example/b.git")]
    )
    later = NOW + timedelta(hours=1)
    again = ListerInterface(conn, ctx, lambda: later).record_listed_origins(
        [origin(lister_id, "https://f.example/a.git", extra_loader_arguments={"depth": 1})]
    )
    assert [o.url for o in first] == ["https://f.example/a.git", "https://f.example/b.git"]
    assert again[0].first_seen == NOW and again[0].last_seen == later
    assert again[0].extra_loader_arguments == {"depth": 1}
    assert sum(ctx.mirror.sizes("git").values()) == 2


def test_record_without_updating_last_seen_keeps_it_for_listed_origins_as_the_reference(
    conn: DictConnection, ctx: Context
) -> None:
    lister_id = ListerInterface(conn, ctx, lambda: NOW).get_or_create_lister("g", "i").id
    ListerInterface(conn, ctx, lambda: NOW).record_listed_origins(
        [origin(lister_id, "https://f.example/a.git")]
    )
    later = NOW + timedelta(hours=1)
    again = ListerInterface(conn, ctx, lambda: later).record_listed_origins(
        [
            origin(lister_id, "https://f.example/a.git", is_fork=True),
            origin(lister_id, "https://f.example/new.git"),
        ],
        update_last_seen=False,
    )
    by_url = {o.url: o for o in again}
    assert by_url["https://f.example/a.git"].last_seen == NOW  # kept
    assert by_url["https://f.example/a.git"].is_fork is True  # the rest written
    assert by_url["https://f.example/new.git"].last_seen == later  # a new one is seen now


def test_a_bad_origin_is_refused_naming_it_and_nothing_is_written(
    api: ListerInterface, conn: DictConnection
) -> None:
    lister = api.get_or_create_lister("g", "i")
    good = origin(lister.id, "https://f.example/a.git")
    with pytest.raises(
        ListerInputError, match=r"listed_origins\[1\]\.visit_type: .*'svn export' cannot"
    ):
        api.record_listed_origins([good, origin(lister.id, "https://f.example/b", "svn export")])
    with pytest.raises(ListerInputError, match=r"listed_origins\[1\]\.last_update"):
        api.record_listed_origins(
            [good, origin(lister.id, "https://f.example/u", last_update="yesterday")]
        )
    with pytest.raises(ListerInputError, match=r"listed_origins\[0\]\.extra_loader_arguments"):
        api.record_listed_origins(
            [origin(lister.id, "https://f.example/u", extra_loader_arguments={"b": b"\x00"})]
        )
    with pytest.raises(ListerInputError, match=r"listed_origins\[0\]\.url: .*forbidden character"):
        api.record_listed_origins([origin(lister.id, "https://f.example/nul\x00")])
    with pytest.raises(ListerInputError, match=r"listed_origins\[0\]\.lister_id: no lister"):
        api.record_listed_origins(
            [origin("00000000-0000-0000-0000-000000000001", "https://f.example/u")]
        )
    assert conn.execute("select count(*) as n from listed_origins").fetchone() == {"n": 0}


def test_listed_origins_page_back_completely_with_two_visit_types_per_url(
    api: ListerInterface,
) -> None:
    lister = api.get_or_create_lister("g", "i")
    other = api.get_or_create_lister("g", "other")
    recorded = {(f"https://f.example/{i:03d}", vt) for i in range(25) for vt in ("git", "hg")}
    api.record_listed_origins([origin(lister.id, u, vt) for u, vt in recorded])
    api.record_listed_origins([origin(other.id, "https://f.example/other")])
    seen: list[tuple[str, str]] = []
    token = None
    while True:
        page = api.get_listed_origins(lister_id=lister.id, limit=7, page_token=token)
        seen += [(o.url, o.visit_type) for o in page.results]
        if (token := page.next_page_token) is None:
            break
    assert len(seen) == len(recorded) and set(seen) == recorded
    # A reference-style token (lister_id, url) resumes after every visit type of the URL.
    resumed = api.get_listed_origins(
        lister_id=lister.id, limit=2, page_token=[str(lister.id), "https://f.example/000"]
    )
    assert [o.url for o in resumed.results] == ["https://f.example/001"] * 2
    by_url = api.get_listed_origins(urls=["https://f.example/other", "https://f.example/003"])
    assert len(by_url.results) == 3 and by_url.next_page_token is None
    assert api.get_listed_origins(enabled=False).results == []
    assert api.get_visit_types_for_listed_origins(lister) == ["git", "hg"]


def test_visit_stats_and_queue_positions_speak_the_reference_vocabulary(
    api: ListerInterface, conn: DictConnection
) -> None:
    lister = api.get_or_create_lister("g", "i")
    api.record_listed_origins([origin(lister.id, "https://f.example/a.git")])
    api.record_listed_origins([origin(lister.id, "https://f.example/never-visited.git")])
    conn.execute(
        "update origin_visit_stats set last_visit_status = 'full', last_snapshot = %s,"
        " last_successful = %s, last_visit = %s, next_visit_queue_position = %s"
        " where url = 'https://f.example/a.git'",
        (b"\x01" * 20, NOW, NOW, NOW + timedelta(days=1)),
    )
    conn.execute(
        "insert into visit_scheduler_queue_position values ('git', %s)"
        " on conflict (visit_type) do update set position = excluded.position",
        (NOW,),
    )
    stats = api.origin_visit_stats_get(
        [
            ("https://f.example/a.git", "git"),
            ("https://f.example/unknown", "git"),
            ("https://f.example/never-visited.git", "git"),  # listed: no row, as the reference
        ]
    )
    assert len(stats) == 1
    assert stats[0].last_visit_status == "successful"
    assert stats[0].last_snapshot == b"\x01" * 20
    assert stats[0].next_visit_queue_position == int((NOW + timedelta(days=1)).timestamp())
    assert api.visit_scheduler_queue_position_get()["git"] == int(NOW.timestamp())


def test_a_last_update_before_1970_or_past_tomorrow_is_refused(
    api: ListerInterface, conn: DictConnection
) -> None:
    lister = api.get_or_create_lister("g", "i")
    good = origin(lister.id, "https://f.example/a.git", last_update=NOW.isoformat())
    for when, message in (
        ("0001-01-01T00:00:00Z", "is before 1970-01-01"),
        ((NOW + timedelta(days=2)).isoformat(), "is more than 1 day past now"),
    ):
        bad = origin(lister.id, "https://f.example/b", last_update=when)
        with pytest.raises(
            ListerInputError, match=rf"listed_origins\[1\]\.last_update: .*{message}"
        ):
            api.record_listed_origins([good, bad])
    assert conn.execute("select count(*) as n from listed_origins").fetchone() == {"n": 0}


def test_an_unknown_visit_type_is_created_paused_and_its_origins_recorded_and_counted(
    api: ListerInterface, conn: DictConnection, ctx: Context
) -> None:
    lister = api.get_or_create_lister("maven", "central")
    recorded = api.record_listed_origins(
        [
            origin(lister.id, "https://repo.example/a", "maven"),
            origin(lister.id, "https://repo.example/b.tar.gz", "tarball-directory"),
            origin(lister.id, "https://repo.example/c.git", "git"),
        ]
    )
    assert len(recorded) == 3
    rows = conn.execute(
        "select name, enabled from visit_types where name in ('maven', 'tarball-directory', 'git')"
        " order by name"
    ).fetchall()
    assert rows == [
        {"name": "git", "enabled": True},
        {"name": "maven", "enabled": False},
        {"name": "tarball-directory", "enabled": False},
    ]
    policies = conn.execute(
        "select count(*) as n from scheduling_policies where visit_type = 'maven'"
    ).fetchone()
    assert policies is not None and policies["n"] >= 1  # the defaults, ready once enabled
    assert sum(ctx.mirror.sizes("maven").values()) == 1
    assert api.get_visit_types_for_listed_origins(lister) == ["git", "maven", "tarball-directory"]


def test_a_page_of_listed_origins_may_hold_more_than_ten_thousand(api: ListerInterface) -> None:
    lister = api.get_or_create_lister("github", "github")
    count = 10_005
    api.record_listed_origins(
        [origin(lister.id, f"https://gh.example/{i:05d}") for i in range(count)]
    )
    page = api.get_listed_origins(lister_id=lister.id, limit=20_000)
    assert len(page.results) == count and page.next_page_token is None


def test_a_page_heavier_than_the_bound_ends_early_with_a_token_and_paging_completes(
    api: ListerInterface, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.listers.interface

    lister = api.get_or_create_lister("gnu", "gnu")
    forty_kb = {"artifacts": [{"url": "https://ftp.example/x.tar.gz", "pad": "x" * 40_000}]}
    urls = [f"https://ftp.example/p{i}" for i in range(10)]
    api.record_listed_origins(
        [origin(lister.id, u, "tarball-directory", extra_loader_arguments=forty_kb) for u in urls]
    )
    monkeypatch.setattr(app.listers.interface, "MAX_PAGE_BYTES", 100_000)
    first = api.get_listed_origins(lister_id=lister.id, limit=100_000)
    assert 1 <= len(first.results) < len(urls) and first.next_page_token is not None
    assert first.results[0].extra_loader_arguments == forty_kb
    seen, token = [o.url for o in first.results], first.next_page_token
    while token is not None:
        page = api.get_listed_origins(lister_id=lister.id, limit=100_000, page_token=token)
        seen += [o.url for o in page.results]
        token = page.next_page_token
    assert seen == urls
    with pytest.raises(ListerInputError, match="limit: expected a positive integer"):
        api.get_listed_origins(limit=0)


def test_an_origin_recorded_disabled_is_stored_returned_and_not_scheduled(
    api: ListerInterface, ctx: Context
) -> None:
    lister = api.get_or_create_lister("g", "i")
    url = "https://f.example/gone.git"
    [stored] = api.record_listed_origins([origin(lister.id, url, enabled=False)])
    assert stored.enabled is False
    assert [o.url for o in api.get_listed_origins(enabled=False).results] == [url]
    assert api.get_listed_origins(enabled=True).results == []
    assert sum(ctx.mirror.sizes("git").values()) == 0
    api.record_listed_origins([origin(lister.id, url)])
    assert sum(ctx.mirror.sizes("git").values()) == 1
    api.record_listed_origins([origin(lister.id, url, enabled=False)])
    assert sum(ctx.mirror.sizes("git").values()) == 0


def test_re_recording_with_none_overwrites_and_the_last_copy_of_a_url_wins(
    api: ListerInterface,
) -> None:
    lister = api.get_or_create_lister("g", "i")
    url = "https://f.example/fork.git"
    api.record_listed_origins(
        [
            origin(
                lister.id,
                url,
                last_update=NOW,
                is_fork=True,
                forked_from_url="https://f.example/upstream.git",
            )
        ]
    )
    [again] = api.record_listed_origins([origin(lister.id, url)])
    assert (again.last_update, again.is_fork, again.forked_from_url) == (None, None, None)
    twice = api.record_listed_origins(
        [
            origin(lister.id, url, extra_loader_arguments={"copy": 1}),
            origin(lister.id, url, extra_loader_arguments={"copy": 2}),
        ]
    )
    assert [o.extra_loader_arguments for o in twice] == [{"copy": 2}]


def test_visit_stats_with_a_status_the_reference_has_not_are_refused_naming_it_and_none_written(
    conn: DictConnection, ctx: Context
) -> None:
    api = TaskInterface(conn, ctx, lambda: NOW)
    lister = api.get_or_create_lister("g", "i")
    api.record_listed_origins([origin(lister.id, "https://f.example/a.git")])
    url, visited = "https://f.example/a.git", NOW - timedelta(hours=1)
    good = {"url": url, "visit_type": "git", "last_visit": visited, "last_visit_status": "failed"}
    bad = {**good, "last_visit_status": "full"}

    with pytest.raises(ListerInputError, match=r"origin_visit_stats\[1\]\.last_visit_status"):
        api.origin_visit_stats_upsert([good, bad])

    assert api.origin_visit_stats_get([(url, "git")]) == []
    api.origin_visit_stats_upsert([good])
    [stored] = api.origin_visit_stats_get([(url, "git")])
    assert stored.last_visit_status == "failed"
