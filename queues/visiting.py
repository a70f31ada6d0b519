"""The claim of the visit running an origin, in the broker's Redis (``visiting.lua``).

A claim is one string per origin and visit type (``queues.keys.visiting``) that
its holder renews while its visit runs and that expires ``ttl_ms`` after the
last renewal: a worker killed or paused loses it without anyone's help.
"""

from __future__ import annotations

from functools import cache

from redis.client import Pipeline
from redis.commands.core import Script

from queues import lua
from queues.errors import Redis
from queues.keys import visiting


@cache
def _script(client: Redis) -> Script:
    return client.register_script(lua("visiting"))


def hold(
    client: Redis, namespace: str, visit_type: str, url: str, value: str, ttl_ms: int
) -> str | None:
    """Take or renew the claim of ``url`` as ``value`` for ``ttl_ms``: None when
    the caller holds it now, else the value of the visit that holds it."""
    return _call(client, visiting(namespace, visit_type, url), value, max(1, ttl_ms))


def hold_on(
    pipe: Pipeline, namespace: str, visit_type: str, url: str, value: str, ttl_ms: int
) -> None:
    """Queue on ``pipe`` (the caller executes it) ``hold``; its reply tells
    ``holder``."""
    # EVAL, not a Script: a pipeline's Script first asks whether Redis has it.
    pipe.eval(lua("visiting"), 1, visiting(namespace, visit_type, url), value, max(1, ttl_ms))


def holder(reply: bytes | str | None) -> str | None:
    """What a claim's reply tells: None when the caller holds it (or has
    released it), else the value of the visit that holds it."""
    if not reply:
        return None
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def release(client: Redis, namespace: str, visit_type: str, url: str, value: str) -> str | None:
    """Release the claim of ``url`` if ``value`` holds it: None when it is free
    of the caller now, else the value of the visit that holds it."""
    return _call(client, visiting(namespace, visit_type, url), value, 0)


def release_on(pipe: Pipeline, namespace: str, visit_type: str, url: str, value: str) -> None:
    """Queue on ``pipe`` (the caller executes it) the release of the claim of
    ``url`` if ``value`` holds it."""
    pipe.eval(lua("visiting"), 1, visiting(namespace, visit_type, url), value, 0)


def _call(client: Redis, key: str, value: str, ttl_ms: int) -> str | None:
    return holder(_script(client)(keys=[key], args=[value, ttl_ms]))
