"""The CLI's one line for a Kafka failure says whether the brokers were away or
answered and refused, and what to check for each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from app.cli.errors import unreachable
from app.kafka.client import PublishError, PublishRefused
from app.settings import get_settings


@pytest.fixture(autouse=True)
def brokers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("REVISIT_KAFKA_BROKERS", "127.0.0.1:1")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_brokers_that_did_not_answer_are_told_as_unreachable_naming_their_setting() -> None:
    message = unreachable(PublishError("not acknowledged in 30s: 1 record(s) unacknowledged"))
    assert message is not None
    assert message.startswith("cannot reach Kafka at 127.0.0.1:1 (set REVISIT_KAFKA_BROKERS)")


def test_a_refused_topic_is_told_as_refused_naming_the_topic_settings() -> None:
    message = unreachable(PublishRefused(KafkaError(KafkaError.TOPIC_EXCEPTION)))
    assert message == (
        "Kafka at 127.0.0.1:1 refused: Broker: Invalid topic (check REVISIT_JOURNAL_TOPIC and "
        "REVISIT_DEAD_LETTER_TOPIC: the topic's name, and revisit's rights on it)"
    )


def test_a_refusal_raised_by_the_client_itself_is_told_as_refused() -> None:
    error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    message = unreachable(KafkaException(error))
    assert message is not None
    assert message.startswith("Kafka at 127.0.0.1:1 refused: Broker: Topic authorization failed")
    assert "REVISIT_KAFKA_BROKERS" not in message


def test_a_too_large_record_is_told_as_refused_naming_the_brokers_limits() -> None:
    message = unreachable(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    assert message is not None
    assert message.endswith("(check the brokers' limits and revisit's rights on them)")
