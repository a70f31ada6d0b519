"""Dramatiq's queues in Redis, read and repaired: their depth, their dead
letters and why each died.

The key names are ``queues.keys.DramatiqQueueKeys`` in Dramatiq's namespace
(Dramatiq's layout, the one place revisit spells it);
``tests/integration/test_broker.py`` and ``test_dead_letters.py`` check it
against a real Dramatiq broker and worker. The reasons are revisit's keys, in
its namespace (``REVISIT_REDIS_NAMESPACE``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from dramatiq import Message
from dramatiq.brokers.redis import DEFAULT_DEAD_MESSAGE_TTL
from dramatiq.errors import DecodeError

from queues import lua
from queues.keys import (
    DRAMATIQ_DEAD_SUFFIX,
    DRAMATIQ_NAMESPACE,
    DramatiqQueueKeys,
    dead_letter_reason,
    uncounted_messages,
)


@dataclass(frozen=True)
class QueueDepth:
    """How many messages a queue holds, by state."""

    waiting: int
    running: int
    delayed: int
    dead: int
    #: Of the waiting, running and delayed messages, those that are not visits.
    others: int = 0

    @property
    def visits(self) -> int:
        """Visits the queue holds, waiting, running or delayed: what counts against
        its max length."""
        return self.waiting + self.running + self.delayed - self.others


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered message."""

    queue: str
    message_id: str
    dead_at_ms: int
    actor: str
    kwargs: dict[str, Any]
    raw: bytes


def depths(client: redis.Redis, queues: list[str]) -> dict[str, QueueDepth]:
    """Depth of each queue, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for q in queues:
        keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, q)
        pipe.llen(keys.waiting)
        pipe.hlen(keys.messages)
        pipe.hlen(keys.delayed_messages)
        pipe.zcard(keys.dead)
        uncounted = uncounted_messages(DRAMATIQ_NAMESPACE, q)
        pipe.eval(lua("uncounted"), 3, uncounted, keys.messages, keys.delayed_messages)
    values = [int(v) for v in pipe.execute()]
    found = {}
    for i, q in enumerate(queues):
        waiting, held, delayed, dead, others = values[5 * i : 5 * i + 5]
        found[q] = QueueDepth(waiting, max(0, held - waiting), delayed, dead, others)
    return found


def origins_held(client: redis.Redis, queues: list[str]) -> set[int]:
    """The origins (``origin_id`` of the visits) that ``queues`` hold a message
    for: waiting, running, delayed for a retry or dead-lettered."""
    held: set[int] = set()
    for q in queues:
        keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, q)
        for key in (keys.messages, keys.delayed_messages, keys.dead_messages):
            for _, raw in client.hscan_iter(key, count=1000):
                message = _decoded(raw)
                origin = message.kwargs.get("origin_id") if message else None
                if isinstance(origin, int):
                    held.add(origin)
    return held


def dead_letter_queues(client: redis.Redis) -> list[str]:
    """Every queue holding dead letters."""
    suffix = DRAMATIQ_DEAD_SUFFIX
    pattern = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, "*").dead
    names = {
        key.decode()[len(DRAMATIQ_NAMESPACE) + 1 : -len(suffix)]
        for key in client.scan_iter(match=pattern, count=1000)
    }
    return sorted(names)


def dead_letters(client: redis.Redis, queue: str, limit: int) -> list[DeadLetter]:
    """The oldest ``limit`` dead letters of a queue."""
    keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, queue)
    entries: list[tuple[bytes, float]] = client.zrange(  # type: ignore[assignment]
        keys.dead, 0, limit - 1, withscores=True
    )
    if not entries:
        return []
    raws: list[bytes | None] = client.hmget(  # type: ignore[assignment]
        keys.dead_messages, [m for m, _ in entries]
    )
    letters = []
    for (message_id, score), raw in zip(entries, raws, strict=True):
        message = _decoded(raw or b"")
        actor, kwargs = (message.actor_name, message.kwargs) if message else ("(undecodable)", {})
        letters.append(
            DeadLetter(queue, message_id.decode(), int(score), actor, kwargs, raw or b"")
        )
    return letters


def _decoded(raw: bytes) -> Message[Any] | None:
    """``raw`` decoded by Dramatiq's encoder, as its consumer would; None if it cannot be."""
    try:
        return Message.decode(raw)
    except DecodeError:
        return None


def requeue(client: redis.Redis, queue: str, message_id: str) -> bool:
    """Put a dead letter back at the end of its queue; False if it is not there."""
    return _dead_letter(client, queue, "requeue", message_id)


def drop(client: redis.Redis, queue: str, message_id: str) -> bool:
    """Delete a dead letter for good; False if it is not there."""
    return _dead_letter(client, queue, "drop", message_id)


def _dead_letter(client: redis.Redis, queue: str, action: str, message_id: str) -> bool:
    keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, queue)
    script_keys = [keys.dead, keys.dead_messages, keys.waiting, keys.messages]
    return bool(client.eval(lua("dead_letter"), len(script_keys), *script_keys, action, message_id))


#: Stored as the body of a dead-lettered id that had none.
NO_BODY = b"(no message body)"


def dead_letter_undecodable(client: redis.Redis, queue: str, now_ms: int) -> list[str]:
    """Move what Dramatiq's consumer cannot run (a body that is not a Dramatiq
    message, an id without a body) to the queue's dead letters; return their ids.

    Dramatiq fails on them and leaves them unacknowledged for ever.
    """
    keys = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, queue)
    msgs = keys.messages
    acks = [k.decode() for k in client.scan_iter(match=keys.acks("*"))]
    held: set[bytes] = set(client.lrange(keys.waiting, 0, -1))  # type: ignore[arg-type]
    for ack in acks:
        held |= client.smembers(ack)  # type: ignore[arg-type]
    candidates: list[tuple[str, bytes]] = [
        ("undecodable", key) for key, raw in client.hscan_iter(msgs) if _decoded(raw) is None
    ]
    bodies: list[bytes | None] = client.hmget(msgs, list(held)) if held else []  # type: ignore[assignment]
    candidates += [("bodiless", i) for i, body in zip(held, bodies, strict=True) if body is None]
    script_keys = [msgs, keys.waiting, keys.dead, keys.dead_messages, *acks]
    script = client.register_script(lua("dead_letter_undecodable"))
    return [
        message_id.decode()
        for mode, message_id in candidates
        if script(keys=script_keys, args=[mode, message_id, now_ms, NO_BODY])
    ]


def record_reason(client: redis.Redis, namespace: str, message_id: str, reason: str) -> None:
    """Keep why a message was dead-lettered as long as Dramatiq keeps the dead letter
    (``namespace``: revisit's)."""
    client.set(dead_letter_reason(namespace, message_id), reason, px=DEFAULT_DEAD_MESSAGE_TTL)


def reasons(client: redis.Redis, namespace: str, message_ids: list[str]) -> list[str | None]:
    """Why each of ``message_ids`` was dead-lettered (None: not recorded), in one round trip."""
    if not message_ids:
        return []
    keys = [dead_letter_reason(namespace, message_id) for message_id in message_ids]
    values: list[bytes | None] = client.mget(keys)  # type: ignore[assignment]
    return [v.decode() if v else None for v in values]


def rewrite_message(
    client: redis.Redis, queue: str, message_id: str, change: Callable[[str], str]
) -> None:
    """Replace the stored body of a waiting or running message of ``queue`` by
    ``change`` of its text (bytes that are not UTF-8 kept as they are)."""
    key = DramatiqQueueKeys(DRAMATIQ_NAMESPACE, queue).messages
    stored = client.hget(key, message_id)
    if isinstance(stored, bytes):
        text = change(stored.decode("utf-8", "surrogateescape"))
        client.hset(key, message_id, text.encode("utf-8", "surrogateescape"))
