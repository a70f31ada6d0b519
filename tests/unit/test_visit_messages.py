"""Building visit messages: their ids and their orders."""

import uuid

import msgspec
import pytest

from app.services.scheduling import VisitOrder
from queues.dramatiq_broker import visit_message

ORDER = VisitOrder(7, "https://x.example/a", "git", {"branch": "main"}, 3, 1.5, "lagging")


def test_each_visit_message_gets_its_own_message_id() -> None:
    messages = [visit_message("visit.git.express", ORDER, "express", 300.0) for _ in range(50)]
    assert len({m.message_id for m in messages}) == 50
    assert all(str(uuid.UUID(m.message_id)) == m.message_id for m in messages)


def test_a_visit_order_cannot_be_changed_once_built() -> None:
    with pytest.raises(AttributeError):
        ORDER.url = "https://elsewhere.example/b"  # type: ignore[misc]
    assert msgspec.structs.replace(ORDER, visit=4).visit == 4 and ORDER.visit == 3


def test_the_visit_message_carries_the_orders_kwargs_then_its_lane() -> None:
    sent = visit_message("visit.git.slow", ORDER, "slow", 600.0)
    assert sent.kwargs == {**ORDER.as_kwargs(), "lane": "slow"}
    assert list(sent.kwargs) == [*ORDER.as_kwargs(), "lane"]
    assert sent.options == {"time_limit": 600_000}
