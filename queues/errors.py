"""The Redis client type and errors as the other layers see them: only queues/
imports redis.

A Redis that is away (connection refused or lost, a timeout) is waited for and
the work retried; any other Redis error is a bug or a refused command.
"""

from __future__ import annotations

from typing import TypeAlias

import redis

#: A client of one Redis server (the broker's, or an unsharded mirror's).
Redis: TypeAlias = redis.Redis
#: Commands sent to one Redis server in one round trip.
Pipeline: TypeAlias = redis.client.Pipeline
#: Anything the Redis client raises.
RedisError = redis.RedisError
#: What Redis raises when it cannot be reached now but may be later.
UNAVAILABLE: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)


def is_unavailable(exc: BaseException) -> bool:
    """True if Redis could not be reached now but may be later (wait and retry)."""
    return isinstance(exc, UNAVAILABLE)
