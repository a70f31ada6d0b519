"""One line, naming the setting to fix, when a service cannot be reached or
refuses, or a setting is wrong.

A command that cannot reach PostgreSQL, Redis or the broker says which and
where (host and port only: a password in a URL is never echoed), instead of
a traceback.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import psycopg
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.kafka.client import KafkaError, is_kafka_error, refusal_of
from app.settings import CONFIG_VARIABLE, ConfigFileError, get_settings
from queues.errors import is_unavailable as redis_unavailable


def _postgres_address() -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(get_settings().database_dsn())
    except psycopg.ProgrammingError:
        return "(unparsable)"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def _redis_address(dsn: str) -> str:
    """A Redis URL's ``host:port`` and database path (never its password)."""
    parts = urlsplit(dsn)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path}"


def _broker_address() -> str | None:
    """The broker Redis's ``host:port``, None when it is the mirror's."""
    settings = get_settings()
    if settings.broker_redis_url is None:
        return None
    return _redis_address(settings.broker_redis_dsn()).partition("/")[0]


def broker_unreachable(exc: BaseException) -> str:
    """The one-line message for the broker Redis being unreachable."""
    address = _broker_address()
    if address is None:
        return unreachable(exc) or first_line(exc)
    return _cannot_reach("the broker Redis", address, "REVISIT_BROKER_REDIS_URL", exc)


def _cannot_reach(service: str, address: str, setting: str, exc: BaseException) -> str:
    return f"cannot reach {service} at {address} (set {setting}): {first_line(exc)}"


#: Refusals about a topic: its name (a setting) or the rights on it.
TOPIC_REFUSALS = frozenset({KafkaError.TOPIC_EXCEPTION, KafkaError.TOPIC_AUTHORIZATION_FAILED})


def kafka_refused(error: KafkaError, topic_setting: str | None = None) -> str:
    """What the brokers refused and what to check: the topic setting (``topic_setting``,
    else both) for a refused topic, the brokers' limits or rights otherwise."""
    if error.code() in TOPIC_REFUSALS:
        check = topic_setting or "REVISIT_JOURNAL_TOPIC and REVISIT_DEAD_LETTER_TOPIC"
        check = f"check {check}: the topic's name, and revisit's rights on it"
    else:
        check = "check the brokers' limits and revisit's rights on them"
    brokers = get_settings().kafka_brokers
    return f"Kafka at {brokers} refused: {error.str()} ({check})"


def first_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says (its type's name if nothing)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def unreachable(exc: BaseException) -> str | None:
    """The one-line message for ``exc`` if it says a service is unreachable or
    the settings are wrong."""
    if isinstance(exc, ConfigFileError):
        return str(exc)
    if isinstance(exc, SettingsError):
        match = re.search(r'field "([a-z_]+)"', str(exc))
        name = match[1] if match else "?"
        cause = f": {first_line(exc.__cause__)}" if exc.__cause__ else ""
        return f"settings: {name}: cannot parse REVISIT_{name.upper()}{cause}"
    if isinstance(exc, ValidationError) and exc.title == "Settings":
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"])
        return (
            f"settings: {name}: {first['msg']} "
            f"(REVISIT_{name.upper()}, or the {CONFIG_VARIABLE} file)"
        )
    if isinstance(exc, psycopg.OperationalError):
        return _cannot_reach("PostgreSQL", _postgres_address(), "REVISIT_DATABASE_URL", exc)
    if redis_unavailable(exc):
        broker = _broker_address()
        mirror = _redis_address(get_settings().redis_dsn())
        if broker is not None and broker != mirror.partition("/")[0] and broker in str(exc):
            return broker_unreachable(exc)
        return _cannot_reach("Redis", mirror, "REVISIT_REDIS_URL", exc)
    refusal = refusal_of(exc)
    if refusal is not None:
        return kafka_refused(refusal)
    if is_kafka_error(exc):
        brokers = get_settings().kafka_brokers
        return _cannot_reach("Kafka", brokers, "REVISIT_KAFKA_BROKERS", exc)
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return f"the database has no revisit schema: run `revisit db migrate` ({first_line(exc)})"
    return None
