"""Dramatiq middleware: the credentials of a refused message are kept nowhere.

The URL rules refuse a URL with a user name or password
(``https://user:password@host/x.git``), but the message that carried it is
logged by Dramatiq with its arguments and dead-lettered as it was sent. In
every worker process, this middleware redacts them (``***``, by
``app.inputs.rules.without_userinfo``) from every log line, and from the stored
copy of a refused message (InvalidPayload) before Dramatiq moves it to the
dead-letter set: ``revisit dead-letters`` still shows the refusal, its reason
and the payload, without the credentials.
"""

from __future__ import annotations

import logging
from typing import Any

from dramatiq import Middleware

from app.inputs.api import InvalidPayload
from app.inputs.rules import without_userinfo
from queues.keys import DRAMATIQ_NAMESPACE, DramatiqQueueKeys


class WithoutUserinfo(logging.Filter):
    """Redacts the credentials of the URLs in a record's message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # the handler reports a record it cannot format
            return True
        redacted = without_userinfo(text)
        if redacted != text:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = without_userinfo(logging.Formatter().formatException(record.exc_info))
        return True


class RedactCredentials(Middleware):
    """Keeps user names and passwords out of the worker's logs and dead letters."""

    def after_process_boot(self, broker: Any) -> None:
        """Filter every handler of the worker process's logs (set up by Dramatiq)."""
        for handler in logging.getLogger().handlers:
            handler.addFilter(WithoutUserinfo())

    def after_process_message(
        self,
        broker: Any,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Redact the stored copy of a refused message, which Dramatiq dead-letters
        (or retries) after the "after" hooks."""
        redis_id = message.options.get("redis_message_id")
        if not isinstance(exception, InvalidPayload) or redis_id is None:
            return
        key = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, message.queue_name).messages
        stored = broker.client.hget(key, redis_id)
        if stored is None:
            return
        text = stored.decode("utf-8", "surrogateescape")
        redacted = without_userinfo(text)
        if redacted != text:
            broker.client.hset(key, redis_id, redacted.encode("utf-8", "surrogateescape"))
