"""Dramatiq's queues in Redis, read and repaired: their depth and dead letters.

The key names are ``queues.keys.DramatiqQueueKeys`` (Dramatiq's layout, the one
place revisit spells it); ``tests/integration/test_broker.py`` and
``test_dead_letters.py`` check it against a real Dramatiq broker and worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from dramatiq import Message
from dramatiq.errors import DecodeError

from queues import lua
from queues.keys import DRAMATIQ_DEAD_SUFFIX, DramatiqQueueKeys, uncounted_messages


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


def depths(client: redis.Redis, namespace: str, queues: list[str]) -> dict[str, QueueDepth]:
    """Depth of each queue, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for q in queues:
        keys = DramatiqQueueKeys(namespace, q)
        pipe.llen(keys.waiting)
        pipe.hlen(keys.messages)
        pipe.hlen(keys.delayed_messages)
        pipe.zcard(keys.dead)
        uncounted = uncounted_messages(namespace, q)
        pipe.eval(lua("uncounted"), 3, uncounted, keys.messages, keys.delayed_messages)
    values = [int(v) for v in pipe.execute()]
    found = {}
    for i, q in enumerate(queues):
        waiting, held, delayed, dead, others = values[5 * i : 5 * i + 5]
        found[q] = QueueDepth(waiting, max(0, held - waiting), delayed, dead, others)
    return found


def dead_letter_queues(client: redis.Redis, namespace: str) -> list[str]:
    """Every queue holding dead letters."""
    suffix = DRAMATIQ_DEAD_SUFFIX
    pattern = DramatiqQueueKeys(namespace, "*").dead
    names = {
        key.decode()[len(namespace) + 1 : -len(suffix)]
        for key in client.scan_iter(match=pattern, count=1000)
    }
    return sorted(names)


def dead_letters(client: redis.Redis, namespace: str, queue: str, limit: int) -> list[DeadLetter]:
    """The oldest ``limit`` dead letters of a queue."""
    keys = DramatiqQueueKeys(namespace, queue)
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


def _script(client: redis.Redis, name: str = "dead_letter") -> Any:
    return client.register_script(lua(name))


def requeue(client: redis.Redis, namespace: str, queue: str, message_id: str) -> bool:
    """Put a dead letter back at the end of its queue; False if it is not there."""
    return _dead_letter(client, namespace, queue, "requeue", message_id)


def drop(client: redis.Redis, namespace: str, queue: str, message_id: str) -> bool:
    """Delete a dead letter for good; False if it is not there."""
    return _dead_letter(client, namespace, queue, "drop", message_id)


def _dead_letter(
    client: redis.Redis, namespace: str, queue: str, action: str, message_id: str
) -> bool:
    keys = DramatiqQueueKeys(namespace, queue)
    script_keys = [keys.dead, keys.dead_messages, keys.waiting, keys.messages]
    return bool(_script(client)(keys=script_keys, args=[action, message_id]))


#: Stored as the body of a dead-lettered id that had none.
NO_BODY = b"(no message body)"


def dead_letter_undecodable(
    client: redis.Redis, namespace: str, queue: str, now_ms: int
) -> list[str]:
    """Move what Dramatiq's consumer cannot run (a body that is not a Dramatiq
    message, an id without a body) to the queue's dead letters; return their ids.

    Dramatiq fails on them and leaves them unacknowledged for ever.
    """
    keys = DramatiqQueueKeys(namespace, queue)
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
    script = _script(client, "dead_letter_undecodable")
    return [
        message_id.decode()
        for mode, message_id in candidates
        if script(keys=script_keys, args=[mode, message_id, now_ms, NO_BODY])
    ]
