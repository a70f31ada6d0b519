from datetime import UTC, datetime, timedelta

from app.domain.cooldown import Cooldowns
from app.domain.placement import MirrorRow, epoch_s, place

NOW = datetime(2026, 5, 1, tzinfo=UTC)
TARGET = NOW + timedelta(days=3)
COOL = Cooldowns()


def row(**kw: object) -> MirrorRow:
    base: dict[str, object] = dict(
        id=7,
        visit_type="git",
        next_visit_queue_position=TARGET,
        last_visit_status=None,
        last_visit=None,
        last_final_date=None,
        last_scheduled=None,
        enabled=True,
    )
    base.update(kw)
    return MirrorRow(**base)  # type: ignore[arg-type]


def test_never_scheduled_origin_waits_in_its_pool_at_its_target() -> None:
    p = place(row(), NOW, COOL)
    assert (p.where, p.score) == ("pool", epoch_s(TARGET))


def test_disabled_origin_is_absent() -> None:
    assert place(row(enabled=False), NOW, COOL).where == "absent"


def test_scheduled_origin_without_result_is_in_flight_until_the_scheduled_cooldown() -> None:
    sent = NOW - timedelta(days=1)
    p = place(row(last_scheduled=sent), NOW, COOL)
    assert (p.where, p.score) == ("inflight", epoch_s(sent))
    lost = place(row(last_scheduled=NOW - COOL.scheduled), NOW, COOL)
    assert lost.where == "pool"


def test_recently_visited_origin_cools_down_for_the_absolute_cooldown() -> None:
    visited = NOW - timedelta(hours=1)
    p = place(
        row(
            last_final_date=visited,
            last_visit_status="full",
            last_scheduled=visited - timedelta(minutes=5),
        ),
        NOW,
        COOL,
    )
    assert (p.where, p.score, p.target) == (
        "cooling",
        epoch_s(visited + COOL.absolute),
        epoch_s(TARGET),
    )


def test_failed_and_not_found_origins_rest_longer() -> None:
    visited = NOW - timedelta(days=10)
    failed = place(row(last_final_date=visited, last_visit_status="failed"), NOW, COOL)
    gone = place(row(last_final_date=visited, last_visit_status="not_found"), NOW, COOL)
    ok = place(row(last_final_date=visited, last_visit_status="full"), NOW, COOL)
    assert failed.where == "cooling" and failed.score == epoch_s(visited + COOL.failed)
    assert gone.score == epoch_s(visited + COOL.not_found)
    assert ok.where == "pool"
