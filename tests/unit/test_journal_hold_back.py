"""What a full journal batch holds back for the next one (``hold_back``), and the
offsets the client commits meanwhile (``next_offsets``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from app.domain.journal_event import VisitStatusEvent
from app.kafka.client import Message, next_offsets
from app.services.journal import hold_back

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def status(origin: str, status: str, visit_type: str = "git") -> VisitStatusEvent:
    return VisitStatusEvent(
        f"https://f/{origin}", visit_type, 1, T0 + timedelta(hours=1), status, None
    )


def test_origins_with_only_created_or_ongoing_statuses_that_may_wait_are_held_back() -> None:
    events = [
        status("carried", "created"),  # message 0, held back as long as it may
        status("ends", "created"),
        status("runs", "created"),
        status("carried", "ongoing"),
        status("runs", "ongoing"),
        status("ends", "full"),
        status("runs", "created", "hg"),
    ]
    # message 2 was refused: the events are those of messages 0, 1, 3, 4...
    indices = [0, 1, 3, 4, 5, 6, 7]

    now, held = hold_back(events, indices, hold_from=1)

    assert held == {3: events[2], 5: events[4], 7: events[6]}
    assert now == [events[0], events[1], events[3], events[5]]


def test_nothing_is_held_back_when_no_message_may_wait_longer() -> None:
    events = [status("a", "created"), status("b", "ongoing")]
    assert hold_back(events, [0, 1], hold_from=2) == (events, {})


class FakeMessage:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def topic(self) -> str:
        return "journal"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


def messages(*at: tuple[int, int]) -> list[Message]:
    return [cast(Message, FakeMessage(p, o)) for p, o in at]


def test_offsets_are_committed_short_of_the_first_message_held_back_in_each_partition() -> None:
    batch = messages((0, 10), (0, 11), (0, 12), (1, 5), (1, 6), (2, 7))
    held = messages((0, 12), (0, 11), (2, 7))

    offsets = next_offsets(batch, held)

    assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 11), (1, 7), (2, 7)]
    assert [(tp.partition, tp.offset) for tp in next_offsets(batch)] == [(0, 13), (1, 7), (2, 8)]
