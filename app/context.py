"""What every process builds from its settings: connections, the mirror, policies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import redis

from app.domain.cooldown import Cooldowns
from app.settings import Settings
from queues.mirror import Mirror


def cooldowns_from(settings: Settings) -> Cooldowns:
    """The cooldowns configured in ``settings``."""
    return Cooldowns(
        absolute=timedelta(seconds=settings.absolute_cooldown_s),
        scheduled=timedelta(seconds=settings.scheduled_cooldown_s),
        failed=timedelta(seconds=settings.failed_cooldown_s),
        not_found=timedelta(seconds=settings.not_found_cooldown_s),
    )


def redis_client(settings: Settings) -> redis.Redis:
    """A Redis client for the mirror (bytes in, bytes out)."""
    return redis.Redis.from_url(settings.redis_dsn())


@dataclass(frozen=True)
class Context:
    """Shared handles of one process."""

    settings: Settings
    redis: redis.Redis
    mirror: Mirror
    cooldowns: Cooldowns

    @classmethod
    def from_settings(cls, settings: Settings) -> Context:
        """Build the handles described by ``settings``."""
        client = redis_client(settings)
        return cls(
            settings, client, Mirror(client, settings.redis_namespace), cooldowns_from(settings)
        )
