"""Running a world on throwaway PostgreSQL and Redis servers (the CLI's path)."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from app.db.connection import DictConnection, connect
from app.db.migrate import migrate
from app.settings import Settings
from app.simulator.config import WorldConfig
from app.simulator.engine import Simulation
from app.simulator.report import build_report


def run_world(
    conn: DictConnection,
    settings: Settings,
    config: WorldConfig,
    days: float,
    on_step: Callable[[float], None] | None = None,
) -> tuple[Simulation, dict[str, Any]]:
    """Run ``config`` for ``days`` against an empty, migrated database and an empty
    Redis namespace; return the simulation and its report."""
    started = time.monotonic()
    sim = Simulation(conn, settings, config, days)
    sim.run(on_step)
    report = build_report(sim, days)
    report["run"] = {"wall_clock_s": round(time.monotonic() - started, 1)}
    return sim, report


@contextlib.contextmanager
def throwaway_services() -> Iterator[tuple[DictConnection, Settings]]:
    """A migrated PostgreSQL and an empty Redis of their own, stopped afterwards:
    a simulation never touches a configured deployment."""
    from app.devtools import embedded

    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="revisit-sim-")))
        # Thrown away at the end, so its commits need not wait for the disk: a
        # simulation spends about a seventh of its time on those waits otherwise.
        dsn = make_conninfo(
            stack.enter_context(embedded.postgres(workdir)),
            options="-c synchronous_commit=off",
        )
        redis_url = stack.enter_context(embedded.redis_server(workdir))
        migrate(dsn)
        settings = Settings(database_url=SecretStr(dsn), redis_url=SecretStr(redis_url))
        conn = stack.enter_context(connect(settings))
        yield conn, settings
