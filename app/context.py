"""What every process builds from its settings: connections, the mirror, policies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import redis

from app.domain.cooldown import Cooldowns
from app.settings import Settings
from queues.mirror import Mirror, MirrorClient


def cooldowns_from(settings: Settings) -> Cooldowns:
    """The cooldowns configured in ``settings``."""
    return Cooldowns(
        absolute=timedelta(seconds=settings.absolute_cooldown_s),
        scheduled=timedelta(seconds=settings.scheduled_cooldown_s),
        failed=timedelta(seconds=settings.failed_cooldown_s),
        not_found=timedelta(seconds=settings.not_found_cooldown_s),
        failed_first=timedelta(seconds=settings.failed_retry_s),
        at_risk_retries=settings.max_failures_in_a_row,
    )


def redis_client(settings: Settings) -> redis.Redis:
    """A client of the broker's Redis (bytes in, bytes out): Dramatiq's queues and
    what lives beside them (worker registry, hoster limits, dead-letter reasons)."""
    return redis.Redis.from_url(settings.broker_redis_dsn())


def mirror_client(settings: Settings) -> MirrorClient:
    """A client of the mirror's Redis: a cluster client when ``redis_cluster``."""
    if settings.redis_cluster:
        return redis.RedisCluster.from_url(settings.redis_dsn())
    return redis.Redis.from_url(settings.redis_dsn())


@dataclass(frozen=True)
class Context:
    """Shared handles of one process."""

    settings: Settings
    #: The broker's Redis (``mirror.client`` is the mirror's, perhaps a cluster).
    redis: redis.Redis
    mirror: Mirror
    cooldowns: Cooldowns

    @classmethod
    def from_settings(cls, settings: Settings) -> Context:
        """Build the handles described by ``settings``."""
        mirror = Mirror(mirror_client(settings), settings.redis_namespace, settings.mirror_shards)
        return cls(settings, redis_client(settings), mirror, cooldowns_from(settings))
