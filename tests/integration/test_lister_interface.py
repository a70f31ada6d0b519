"""The lister interface (the reference's semantics) against real PostgreSQL and Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.db.connection import DictConnection
from app.listers.interface import ListerInterface
from app.listers.models import ListerInputError, StaleData
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
    assert [lst.name for lst in api.get_listers()] == ["cgit", "gitlab"]
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


def test_a_bad_origin_is_refused_naming_it_and_nothing_is_written(
    api: ListerInterface, conn: DictConnection
) -> None:
    lister = api.get_or_create_lister("g", "i")
    good = origin(lister.id, "https://f.example/a.git")
    with pytest.raises(ListerInputError, match=r"listed_origins\[1\]\.visit_type: unknown"):
        api.record_listed_origins([good, origin(lister.id, "https://f.example/b", "bzr")])
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
    conn.execute(
        "update origin_visit_stats set last_visit_status = 'full', last_snapshot = %s,"
        " last_successful = %s, next_visit_queue_position = %s",
        (b"\x01" * 20, NOW, NOW + timedelta(days=1)),
    )
    conn.execute(
        "insert into visit_scheduler_queue_position values ('git', %s)"
        " on conflict (visit_type) do update set position = excluded.position",
        (NOW,),
    )
    stats = api.origin_visit_stats_get(
        [("https://f.example/a.git", "git"), ("https://f.example/unknown", "git")]
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
