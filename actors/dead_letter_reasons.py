"""Dramatiq middleware: remember why each message was dead-lettered.

Dramatiq's dead-letter set keeps the message as it was sent, not the error
that killed it; ``revisit dead-letters`` shows this reason beside it. The
credentials of URLs (``https://user:password@host/x.git``) are redacted
(``***``, by ``app.inputs.rules.without_userinfo``) from the reason, and from
the stored copy of a message refused as InvalidPayload before Dramatiq moves
it to the dead-letter set.
"""

from __future__ import annotations

from typing import Any

from dramatiq import Middleware

from app.inputs.api import InvalidPayload
from app.inputs.rules import without_userinfo
from queues.dramatiq_queues import record_reason, rewrite_message
from queues.errors import Redis

#: Longest reason kept (the exception's text, not its traceback).
MAX_REASON_CHARS = 1000


class DeadLetterReasons(Middleware):
    """Stores ``<exception type>: <text>`` of a failed message as long as Dramatiq
    keeps the dead letter."""

    def __init__(self, client: Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def after_process_message(
        self,
        broker: Any,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Runs after Retries (added before it), which marks a message failed when it
        gives up, and before Dramatiq moves it to the dead-letter set."""
        redis_id = message.options.get("redis_message_id")
        if exception is None or not message.failed or redis_id is None:
            return
        reason = without_userinfo(f"{type(exception).__name__}: {exception}")[:MAX_REASON_CHARS]
        record_reason(self.client, self.namespace, redis_id, reason)
        if isinstance(exception, InvalidPayload):
            rewrite_message(self.client, message.queue_name, redis_id, without_userinfo)
