"""Building visit messages: their ids, their copy with a Redis id, their orders."""

import os
import uuid

import dramatiq
import msgspec
import pytest

from app.scheduling import VisitOrder
from queues import dramatiq_broker
from queues.dramatiq_broker import MESSAGE_IDS_PER_DRAW, _with_redis_id, message_id, visit_message

ORDER = VisitOrder(7, "https://x.example/a", "git", {"branch": "main"}, 3, 1.5, "lagging")


def test_message_ids_are_distinct_uuid4_strings_across_draws() -> None:
    ids = [message_id() for _ in range(3 * MESSAGE_IDS_PER_DRAW)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_each_visit_message_gets_its_own_message_id() -> None:
    messages = [visit_message("visit.git.express", ORDER, "express", 300.0) for _ in range(50)]
    assert len({m.message_id for m in messages}) == 50
    assert all(str(uuid.UUID(m.message_id)) == m.message_id for m in messages)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_hands_out_its_parents_buffered_ids() -> None:
    message_id()  # the buffer now holds ids the parent will hand out
    buffered = set(dramatiq_broker._message_ids)
    assert buffered
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(read)
        os.write(write, message_id().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        from_child = pipe.read()
    os.waitpid(child, 0)
    assert from_child and from_child not in buffered
    assert set(dramatiq_broker._message_ids) == buffered  # the parent's are untouched


def test_the_copy_with_a_redis_id_equals_dramatiqs_copy_and_leaves_the_message_alone() -> None:
    sent = visit_message("visit.git.express", ORDER, "express", 300.0)
    copy = _with_redis_id(sent, "r-1")
    assert copy == sent.copy(options={"redis_message_id": "r-1"})
    assert type(copy) is dramatiq.Message
    assert copy.encode() == sent.copy(options={"redis_message_id": "r-1"}).encode()
    assert "redis_message_id" not in sent.options
    assert copy.kwargs is sent.kwargs  # a shallow copy, as dataclasses.replace makes


def test_a_visit_order_cannot_be_changed_once_built() -> None:
    with pytest.raises(AttributeError):
        ORDER.url = "https://elsewhere.example/b"  # type: ignore[misc]
    assert msgspec.structs.replace(ORDER, visit=4).visit == 4 and ORDER.visit == 3


def test_the_visit_message_carries_the_orders_kwargs_then_its_lane() -> None:
    sent = visit_message("visit.git.slow", ORDER, "slow", 600.0)
    assert sent.kwargs == {**ORDER.as_kwargs(), "lane": "slow"}
    assert list(sent.kwargs) == [*ORDER.as_kwargs(), "lane"]
    assert sent.options == {"time_limit": 600_000}
