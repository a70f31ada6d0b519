"""Knobs of the lister processes (RPC server, lister runs), read from ``REVISIT_*``.

Kept apart from ``app.settings.Settings`` because only the lister processes
read them; the same environment configures both.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ListerSettings(BaseSettings):
    """The RPC server's address and the lister runs' timing."""

    model_config = SettingsConfigDict(env_prefix="REVISIT_", extra="ignore", frozen=True)

    rpc_host: str = Field(
        default="127.0.0.1", description="address the RPC server binds (loopback by default)"
    )
    rpc_port: int = Field(default=5008, ge=0, le=65535, description="the reference's port")
    rpc_database_connections: int = Field(
        default=4, ge=1, le=64, description="PostgreSQL connections the RPC server keeps"
    )
    rpc_metrics_port: int = Field(default=0, ge=0, le=65535, description="0: off")
    lister_scheduler_metrics_port: int = Field(default=0, ge=0, le=65535, description="0: off")
    lister_poll_interval_s: float = Field(
        default=5.0, gt=0, description="how often the lister scheduler looks for due runs"
    )
    lister_run_timeout_s: float = Field(
        default=6 * 3600.0, gt=0, description="a run not finished after this is lost and re-sent"
    )
    lister_retry_base_s: float = Field(
        default=60.0, gt=0, description="wait before retrying a failed run; doubles per failure"
    )
    lister_retry_max_s: float = Field(
        default=6 * 3600.0, gt=0, description="longest wait between retries of a failing lister"
    )
    lister_batch_size: int = Field(
        default=1000, ge=1, le=100_000, description="origins recorded per transaction by a run"
    )


@lru_cache(maxsize=1)
def get_lister_settings() -> ListerSettings:
    """The process-wide lister settings, read once from the environment."""
    return ListerSettings()
