import logging

from app.kafka.client import OncePer


def record(facility: str) -> logging.LogRecord:
    return logging.LogRecord(
        "revisit.kafka", logging.ERROR, "", 0, "%s [%s] %s", (facility, "c-1", "down"), None
    )


def test_a_repeated_librdkafka_message_is_logged_once_per_interval_with_the_hint() -> None:
    once = OncePer(60.0, "REVISIT_KAFKA_BROKERS is 127.0.0.1:1")
    passed = [once.filter(record("FAIL")) for _ in range(50)]
    assert passed.count(True) == 1
    assert once.filter(record("ERROR")) is True
    first = record("OTHER")
    once.filter(first)
    assert "REVISIT_KAFKA_BROKERS is 127.0.0.1:1" in first.getMessage()
