"""What every process builds from its settings: connections, the mirror, policies,
and the scheduling's research knobs (``Tuning``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import timedelta

from app.domain.cooldown import Cooldowns
from app.settings import Settings
from queues.errors import Redis
from queues.mirror import Mirror, MirrorClient, connect_mirror

#: The ladder unit the rests of ``Tuning`` are given at (REVISIT_LADDER_UNIT_S's default).
DAY_S = 86400.0


@dataclass(frozen=True)
class Tuning:
    """Research knobs of the scheduling: constants, not settings. Every process runs
    these defaults; the simulator's worlds vary them (a world's ``[settings]``) to
    compare choices. The rests are given at a ladder unit of a day and scale with
    REVISIT_LADDER_UNIT_S, so a shortened ladder (the demo, the tests) shortens them."""

    #: Least rest after any visit.
    absolute_cooldown_s: float = 12 * 3600.0
    #: A visit sent this long ago and not finished is presumed lost.
    scheduled_cooldown_s: float = 7 * DAY_S
    #: Longest rest after failed visits in a row (the reference's flat failed cooldown).
    failed_cooldown_s: float = 14 * DAY_S
    #: Rest after a first failed visit, doubled per further failure up to
    #: failed_cooldown_s (set it to failed_cooldown_s for the reference's flat rest).
    failed_retry_s: float = DAY_S
    not_found_cooldown_s: float = 31 * DAY_S
    max_failures_in_a_row: int = 3
    #: A new origin is expected to change once per this many ladder units.
    change_rate_prior_units: float = 30.0
    #: How often the scheduler re-solves the age-optimal allocation.
    allocation_interval_s: float = 600.0
    #: age_optimal: share of each batch kept for never visited origins, however
    #: much other work is due earlier (seed 000: visit every origin once soon).
    first_visit_share: float = 0.1
    #: Origins whose age-optimal target the scheduler re-plans per step and visit
    #: type (a sweep of the table; 0: never).
    replan_batch: int = 2000

    def cooldowns(self, ladder_unit_s: float) -> Cooldowns:
        """The cooldowns at ``ladder_unit_s``."""
        scale = ladder_unit_s / DAY_S
        return Cooldowns(
            absolute=timedelta(seconds=self.absolute_cooldown_s * scale),
            scheduled=timedelta(seconds=self.scheduled_cooldown_s * scale),
            failed=timedelta(seconds=self.failed_cooldown_s * scale),
            not_found=timedelta(seconds=self.not_found_cooldown_s * scale),
            failed_first=timedelta(seconds=self.failed_retry_s * scale),
            at_risk_retries=self.max_failures_in_a_row,
        )


#: The names a simulated world may vary.
TUNING_KNOBS = frozenset(f.name for f in fields(Tuning))


def redis_client(settings: Settings) -> Redis:
    """A client of the broker's Redis (bytes in, bytes out): Dramatiq's queues and
    what lives beside them (worker registry, hoster limits, dead-letter reasons)."""
    return Redis.from_url(settings.broker_redis_dsn())


def mirror_client(settings: Settings) -> MirrorClient:
    """A client of the mirror's Redis: a cluster client when ``redis_cluster``."""
    return connect_mirror(settings.redis_dsn(), cluster=settings.redis_cluster)


@dataclass(frozen=True)
class Context:
    """Shared handles of one process."""

    settings: Settings
    #: The broker's Redis (``mirror.client`` is the mirror's, perhaps a cluster).
    redis: Redis
    mirror: Mirror
    cooldowns: Cooldowns
    tuning: Tuning = field(default_factory=Tuning)
    #: Each origin's true change rate by URL, known beforehand: only the
    #: simulator's ``oracle`` baseline sets it (``StatsPolicy.known_rate_per_s``).
    known_rate_per_s: Callable[[str], float | None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, tuning: Tuning | None = None) -> Context:
        """Build the handles described by ``settings`` (and ``tuning``, the simulator's)."""
        tuning = tuning or Tuning()
        mirror = Mirror(mirror_client(settings), settings.redis_namespace, settings.mirror_shards)
        cooldowns = tuning.cooldowns(settings.ladder_unit_s)
        return cls(settings, redis_client(settings), mirror, cooldowns, tuning)
