"""The offsets a journal batch commits (``next_offsets``)."""

from __future__ import annotations

from app.kafka.client import Message, next_offsets


def message(topic: str, partition: int, offset: int) -> Message:
    return Message(topic=topic, partition=partition, offset=offset)


def test_each_partition_commits_one_past_its_last_message() -> None:
    batch = [
        message("journal", 2, 7),
        message("journal", 0, 40),
        message("journal", 2, 8),
        message("journal", 0, 41),
        message("journal", 2, 9),
    ]
    offsets = [(tp.topic, tp.partition, tp.offset) for tp in next_offsets(batch)]
    assert offsets == [("journal", 0, 42), ("journal", 2, 10)]


def test_the_same_partition_number_of_two_topics_is_two_offsets() -> None:
    batch = [message("b", 1, 3), message("a", 1, 5)]
    offsets = [(tp.topic, tp.partition, tp.offset) for tp in next_offsets(batch)]
    assert offsets == [("a", 1, 6), ("b", 1, 4)]


def test_an_empty_batch_commits_nothing() -> None:
    assert next_offsets([]) == []
