"""Dramatiq middleware: remember why each message was dead-lettered.

Dramatiq's dead-letter set keeps the message as it was sent, not the error
that killed it; ``revisit dead-letters`` shows this reason beside it.
"""

from __future__ import annotations

from typing import Any

from dramatiq import Middleware

from app.inputs.rules import without_userinfo
from queues.errors import Redis
from queues.keys import dead_letter_reason

#: Longest reason kept (the exception's text, not its traceback).
MAX_REASON_CHARS = 1000


class DeadLetterReasons(Middleware):
    """Stores ``<exception type>: <text>`` of a failed message for ``ttl_s``."""

    def __init__(self, client: Redis, namespace: str, ttl_s: float) -> None:
        self.client = client
        self.namespace = namespace
        self.ttl_s = int(ttl_s)

    def after_process_message(
        self,
        broker: Any,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Runs after Retries (added before it), which marks a message failed when it
        gives up."""
        redis_id = message.options.get("redis_message_id")
        if exception is None or not message.failed or redis_id is None:
            return
        reason = without_userinfo(f"{type(exception).__name__}: {exception}")[:MAX_REASON_CHARS]
        self.client.set(dead_letter_reason(self.namespace, redis_id), reason, ex=self.ttl_s)
