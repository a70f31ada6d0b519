"""A journal batch is split into groups of origins written in parallel
(``split_by_origin``): each origin's messages in one group, in their order."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.domain.journal_event import VisitStatusEvent
from app.services.journal_batch import split_by_origin

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS = st.lists(
    st.builds(
        lambda origin, visit_type, visit: VisitStatusEvent(
            f"https://f/{origin}", visit_type, visit, T0 + timedelta(hours=visit), "full", None
        ),
        st.integers(0, 6),
        st.sampled_from(["git", "hg"]),
        st.integers(0, 20),
    ),
    max_size=40,
)


def hashed_one_by_one(events: list[VisitStatusEvent], parts: int) -> list[list[VisitStatusEvent]]:
    """The split as it was first written: each message hashed on its own."""
    groups: list[list[VisitStatusEvent]] = [[] for _ in range(parts)]
    for event in events:
        key = f"{event.origin}\x00{event.visit_type}".encode()
        groups[zlib.crc32(key) % parts].append(event)
    return [g for g in groups if g] or [events]


@given(EVENTS, st.integers(1, 4))
def test_the_groups_are_those_of_hashing_every_message_in_the_same_order(
    events: list[VisitStatusEvent], parts: int
) -> None:
    assert split_by_origin(events, parts) == hashed_one_by_one(events, parts)


@given(EVENTS, st.integers(2, 4))
def test_no_origin_is_in_two_groups(events: list[VisitStatusEvent], parts: int) -> None:
    seen: dict[tuple[str, str], int] = {}
    for index, group in enumerate(split_by_origin(events, parts)):
        for event in group:
            assert seen.setdefault((event.origin, event.visit_type), index) == index
