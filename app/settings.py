"""Process configuration, read from the environment (prefix ``REVISIT_``) and,
beneath it, from the TOML file named by ``REVISIT_CONFIG`` (keys are the
field names without the prefix: ``redis_url = "redis://..."``).

Every Procfile process, the lister ones included, reads the same settings, so
one environment (or one file) configures the whole deployment; a variable
overrides the file. A key of the file or a ``REVISIT_*`` variable that names
no setting is refused, naming it, rather than silently ignored (a misspelt
setting would otherwise leave its default in force). Service addresses that
embed credentials are SecretStr so they never show up in logs or ``repr``.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

#: The variable naming the settings file.
CONFIG_VARIABLE = "REVISIT_CONFIG"
#: The queues ``revisit worker`` has its Dramatiq processes declare (a JSON list).
WORKER_QUEUES_VARIABLE = "REVISIT_WORKER_QUEUES"
#: The loader of each visit type ``revisit worker`` serves (a JSON object).
WORKER_LOADERS_VARIABLE = "REVISIT_WORKER_LOADERS"
#: The Procfile's per-process metrics ports: each sets REVISIT_METRICS_PORT for
#: its process.
PROCFILE_METRICS_PORTS = (
    "REVISIT_SCHEDULER_METRICS_PORT",
    "REVISIT_JOURNAL_METRICS_PORT",
    "REVISIT_RPC_METRICS_PORT",
    "REVISIT_LISTER_SCHEDULER_METRICS_PORT",
    "REVISIT_EXPRESS_WORKER_METRICS_PORT",
    "REVISIT_SLOW_WORKER_METRICS_PORT",
    "REVISIT_PRIORITY_WORKER_METRICS_PORT",
    "REVISIT_API_METRICS_PORT",
    "REVISIT_LISTER_WORKER_METRICS_PORT",
)
#: ``REVISIT_*`` variables that are not settings: the settings file, the log
#: level (read before the settings), the Procfile's metrics ports, the worker's
#: queues and loaders.
OTHER_VARIABLES = frozenset(
    {CONFIG_VARIABLE, "REVISIT_LOG_LEVEL", WORKER_QUEUES_VARIABLE, WORKER_LOADERS_VARIABLE}
).union(PROCFILE_METRICS_PORTS)
#: Variables of the test suite and its tools, never read by revisit itself.
TEST_VARIABLE_PREFIX = "REVISIT_TEST_"


class ConfigFileError(ValueError):
    """The settings file cannot be read, it or the environment names an unknown
    setting, or a service address cannot be parsed; the text names the file or
    variable."""


class Settings(BaseSettings):
    """What an operator sets (README, Configuration); defaults suit a single host.
    The research knobs are constants beside their code, and visit types and
    their tuning are rows of the visit_types table."""

    model_config = SettingsConfigDict(env_prefix="REVISIT_", extra="forbid")

    database_url: SecretStr = Field(
        default=SecretStr("postgresql://postgres@127.0.0.1:5432/revisit"),
        description="libpq connection string of the PostgreSQL source of truth",
    )
    redis_url: SecretStr = Field(
        default=SecretStr("redis://127.0.0.1:6379/0"),
        description="Redis holding the scheduling mirror (and, unless REVISIT_BROKER_REDIS_URL "
        "is set, the Dramatiq queues)",
    )
    redis_cluster: bool = Field(
        default=False,
        description="REVISIT_REDIS_URL names a node of a Redis Cluster: the mirror is spread "
        "over its masters (one hash tag per visit type, or per shard)",
    )
    mirror_shards: dict[str, Annotated[int, Field(ge=1, le=256)]] = Field(
        default={},
        description='shards of a visit type\'s mirror, e.g. {"git": 6} (default 1): one hash '
        "tag each, so one visit type spreads over a cluster's masters; a change is applied "
        "by the rebuild it triggers",
    )
    broker_redis_url: SecretStr | None = Field(
        default=None,
        description="Redis of the Dramatiq queues, worker registry, hoster limits and dead-letter "
        "reasons (a plain Redis, never a cluster); default: REVISIT_REDIS_URL",
    )
    kafka_brokers: str = Field(default="127.0.0.1:9092", description="bootstrap.servers")
    journal_topic: str = Field(default="swh.journal.objects.origin_visit_status")
    dead_letter_topic: str = Field(default="revisit.journal.dead_letter")
    journal_group_id: str = Field(default="revisit-journal-client")

    redis_namespace: str = Field(default="revisit", pattern=r"^[a-z][a-z0-9_]*$")

    ladder_unit_s: float = Field(
        default=86400.0,
        gt=0,
        description="length of one ladder 'day' (seed 000); the cooldowns scale with it",
    )

    express_time_limit_s: float = Field(
        default=300.0, gt=0, description="longest a visit may hold an express worker (seed 003)"
    )
    allowed_internal_hosts: list[str] = Field(
        default=[],
        description="internal hosts visits may reach: host names, addresses or networks "
        '(e.g. ["forge.internal", "10.1.0.0/16"]); "localhost" also allows file:// URLs (the '
        'worker\'s own disk); "*": every one. Default: none, so a request cannot make a worker '
        "probe its own network",
    )
    hoster_limits: dict[str, int] = Field(
        default={},
        description='visits in flight allowed per hoster, e.g. {"gitlab.example": 4, "*": 8} '
        '("*": any other hoster)',
    )
    worker_visit_types_allow: list[str] | None = Field(
        default=None, description="visit types this worker pool serves (default: all)"
    )
    worker_visit_types_deny: list[str] = Field(
        default=[], description="visit types this worker pool never serves"
    )

    metrics_address: str = Field(default="127.0.0.1")
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="port this process serves its /metrics on (the Procfile gives each "
        "process its own, from REVISIT_<PROCESS>_METRICS_PORT); 0: off",
    )

    rpc_host: str = Field(
        default="127.0.0.1", description="address the RPC server binds (loopback by default)"
    )
    rpc_port: int = Field(default=5008, ge=0, le=65535, description="the reference's port")

    @field_validator("redis_url", "broker_redis_url")
    @classmethod
    def _redis_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.match(
            r"(rediss?|unix)://", value.get_secret_value(), re.IGNORECASE
        ):
            raise ValueError(
                "not a Redis URL: expected redis://host:port/db (or rediss://, unix://)"
            )
        return value

    @field_validator("allowed_internal_hosts")
    @classmethod
    def _hosts_or_networks(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            if not re.fullmatch(r"\*|[A-Za-z0-9.:_-]+(?:/\d{1,3})?|\[[0-9A-Fa-f:.]+\]", entry):
                raise ValueError(f"{entry!r}: expected a host name, an address, a network or *")
        return entries

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then the REVISIT_CONFIG file."""
        names = set(settings_cls.model_fields)
        for variable in sorted(os.environ):
            name = variable.removeprefix("REVISIT_").lower()
            if (
                variable.startswith("REVISIT_")
                and name not in names
                and variable not in OTHER_VARIABLES
                and not variable.startswith(TEST_VARIABLE_PREFIX)
            ):
                raise ConfigFileError(f"{variable}: no such setting (unset it)")
        sources = [init_settings, env_settings]
        path = os.environ.get(CONFIG_VARIABLE)
        if path:
            _check_file(path, names)
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    def served_visit_types(self, known: Iterable[str]) -> list[str]:
        """Which of the ``known`` visit types (the table's) a worker pool serves:
        allowlist, then denylist (seed 004)."""
        allowed = self.worker_visit_types_allow
        return [
            vt
            for vt in sorted(known)
            if (allowed is None or vt in allowed) and vt not in self.worker_visit_types_deny
        ]

    def database_dsn(self) -> str:
        """The PostgreSQL connection string, unwrapped for the driver."""
        return self.database_url.get_secret_value()

    def redis_dsn(self) -> str:
        """The mirror's Redis URL, unwrapped for the driver."""
        return self.redis_url.get_secret_value()

    def broker_redis_dsn(self) -> str:
        """The Dramatiq broker's Redis URL (the mirror's unless set apart)."""
        url = self.broker_redis_url or self.redis_url
        return url.get_secret_value()


def _check_file(path: str, names: set[str]) -> None:
    """Refuse a settings file that is missing, not TOML, or has a key naming no setting."""
    if not Path(path).is_file():
        raise ConfigFileError(f"{CONFIG_VARIABLE}: no settings file {path!r}")
    try:
        keys = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{CONFIG_VARIABLE}: {path} is not TOML: {exc}") from None
    unknown = sorted(set(keys) - names)
    if unknown:
        raise ConfigFileError(f"{CONFIG_VARIABLE}: {path}: {unknown[0]}: no such setting")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
