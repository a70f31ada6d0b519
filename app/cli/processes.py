"""The long-running processes: scheduler, journal, worker, api, demo, simulate, and
the Procfile run by `revisit up` or systemd units (`revisit systemd-units`)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

import psycopg
import typer

from app.cli.common import console, fail, refusing, say
from app.cli.errors import first_line
from app.cli.procfile import (
    PROCFILE,
    ProcessLine,
    ProcfileError,
    ProcfileRunner,
    read_procfile,
    select,
)
from app.cli.procfile import systemd_units as _procfile_units
from app.db.connection import connect
from app.db.visit_types import visit_type_loaders
from app.domain.backoff import Backoff
from app.domain.lanes import LANES, Lane
from app.domain.queue_names import API_QUEUE, first_visits_queue, lane_queue
from app.loaders.base import installed_loaders
from app.settings import (
    WORKER_LOADERS_VARIABLE,
    WORKER_QUEUES_VARIABLE,
    Settings,
    get_settings,
)


def _visit_types(settings: Settings, *, wait: bool) -> dict[str, str]:
    """The visit types of the table; with ``wait``, waiting for PostgreSQL while it
    cannot be reached (bounded backoff, one line each time), as the processes do."""
    backoff = Backoff(1.0, 30.0)
    while True:
        try:
            with connect(settings) as conn:
                return visit_type_loaders(conn)
        except psycopg.OperationalError as exc:
            if not wait:
                raise
            delay = backoff.next_delay_s()
            say(
                f"waiting for PostgreSQL (REVISIT_DATABASE_URL) to read the visit types: "
                f"{first_line(exc)}; retrying in {delay:.0f}s",
                stderr=True,
            )
            time.sleep(delay)


def _warn_missing_loaders(loaders: Mapping[str, str]) -> None:
    """Say at start which visit types have no loader: their visits fail."""
    missing = sorted(vt for vt, loader in loaders.items() if loader not in installed_loaders())
    if missing:
        say(
            f"warning: no loader installed for visit type(s) {', '.join(missing)}: their "
            "visits are recorded as failed; install a loader, or leave them out of "
            "this pool (REVISIT_WORKER_VISIT_TYPES_DENY)",
            stderr=True,
        )


def become(module: str, *args: str) -> None:
    """Replace this process with ``python -P -m MODULE ARGS``: the process code
    in a fresh interpreter. Safe-path mode (``-P``, and ``PYTHONSAFEPATH`` for
    every interpreter it starts in turn) keeps the working directory off the
    import path, so a folder named ``sql`` or ``app`` there cannot shadow
    revisit's packages."""
    os.environ["PYTHONSAFEPATH"] = "1"
    os.execv(sys.executable, [sys.executable, "-P", "-m", module, *args])


def port_free(port: int, address: str, setting: str, what: str = "serve metrics") -> None:
    """Refuse to start when a port to listen on is taken (by another revisit, say)."""
    if not port:
        return
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            raise fail(
                f"{setting}: cannot {what} on {address}:{port} ({exc.strerror}); "
                f"choose a free port{', or 0 for no metrics' if what == 'serve metrics' else ''}"
            ) from exc


def scheduler() -> None:
    """Run the scheduler: keep every visit queue fed from the Redis pools."""
    settings = get_settings()
    with contextlib.suppress(psycopg.OperationalError):  # the scheduler waits for it
        _warn_missing_loaders(_visit_types(settings, wait=False))
    port_free(settings.metrics_port, settings.metrics_address, "REVISIT_METRICS_PORT")
    become("actors", "scheduler")


def journal(
    processes: Annotated[
        int,
        typer.Option(
            min=1,
            help="client processes in the consumer group: about one per core, at most the "
            "journal topic's partitions",
        ),
    ] = 1,
) -> None:
    """Run the journal client: apply origin_visit_status messages to the visit stats.

    With ``--processes N`` (N > 1) a supervisor runs N clients in one consumer
    group, serves their metrics summed on REVISIT_METRICS_PORT, and
    exits non-zero if one of them dies (actors/supervisor.py)."""
    settings = get_settings()
    port_free(settings.metrics_port, settings.metrics_address, "REVISIT_METRICS_PORT")
    become("actors", *(["journal"] if processes == 1 else ["journal-group", str(processes)]))


#: Which lanes (``app.domain.lanes.Lane``) a worker pool serves, by ``--lane``.
ServedLanes = Literal["express", "slow", "priority", "recurrent", "all"]
LANES_SERVED: dict[ServedLanes, tuple[Lane, ...]] = {
    "express": ("express",),
    "slow": ("slow",),
    "priority": ("priority",),
    "recurrent": ("express", "slow"),
    "all": LANES,
}


def worker(
    processes: Annotated[int, typer.Option(min=1)] = 1,
    threads: Annotated[int, typer.Option(min=1)] = 4,
    lane: Annotated[
        ServedLanes, typer.Option(help="the lanes this worker pool serves")
    ] = "recurrent",
    first_visits_prefix: Annotated[
        list[str] | None,
        typer.Option(help="also serve the first-visits queues of listers with this prefix"),
    ] = None,
) -> None:
    """Run Dramatiq workers for the lanes of the visit types this pool serves: the
    visit_types table's, filtered by REVISIT_WORKER_VISIT_TYPES_ALLOW / _DENY, read
    at start (a visit type added later is served after a restart)."""
    settings = get_settings()
    loaders = _visit_types(settings, wait=True)
    served = settings.served_visit_types(loaders)
    queues = []
    for vt in served:
        queues += [first_visits_queue(prefix, vt) for prefix in first_visits_prefix or []]
        queues += [lane_queue(vt, name) for name in LANES_SERVED[lane]]
    if not queues:
        raise fail("no visit type to serve: check REVISIT_WORKER_VISIT_TYPES_ALLOW / _DENY")
    _warn_missing_loaders({vt: loaders[vt] for vt in served})
    # The worker module declares these queues (Dramatiq consumes declared queues only)
    # and runs these loaders.
    os.environ[WORKER_QUEUES_VARIABLE] = json.dumps(queues)
    os.environ[WORKER_LOADERS_VARIABLE] = json.dumps({vt: loaders[vt] for vt in served})
    exec_dramatiq("actors.worker", processes, threads, queues)


def exec_dramatiq(module: str, processes: int, threads: int, queues: list[str]) -> None:
    """Become a Dramatiq worker pool of ``module`` on ``queues``, its metrics set up first."""
    settings = get_settings()
    port_free(settings.metrics_port, settings.metrics_address, "REVISIT_METRICS_PORT")
    from monitoring.dramatiq_metrics import worker_metrics_env

    os.environ.update(worker_metrics_env(settings))
    # Dramatiq puts its --path (default: the working directory) first on the
    # import path: point it at where revisit's packages are installed instead.
    installed = str(Path(__file__).resolve().parents[2])
    pool = ["--processes", str(processes), "--threads", str(threads)]
    become("dramatiq", module, "--path", installed, *pool, "--queues", *queues)


def api(threads: Annotated[int, typer.Option(min=1)] = 2) -> None:
    """Run the actor API (request_visit, adjust_priority, cancel_request, add_forge,
    record_listing)."""
    exec_dramatiq("actors.api", 1, threads, [API_QUEUE])


def demo(
    repos: Annotated[
        int, typer.Option(min=2, max=200, help="git repositories in the demo forge")
    ] = 12,
    duration: Annotated[
        float | None, typer.Option(min=1, help="stop after this many seconds")
    ] = None,
    use_configured_services: Annotated[
        bool,
        typer.Option(
            help="run on the services REVISIT_DATABASE_URL, REVISIT_REDIS_URL and "
            "REVISIT_KAFKA_BROKERS name (the demo writes its data there and leaves it)"
        ),
    ] = False,
    archive: Annotated[
        bool,
        typer.Option(
            help="visit with the archive's swh-loader-git into a memory swh-storage whose "
            "journal feeds revisit (needs the extra swh)"
        ),
    ] = False,
) -> None:
    """Run everything on local throwaway services with a demo forge of git repositories."""
    from app.devtools.demo import SERVICE_VARIABLES, run_demo

    configured = [v for v in SERVICE_VARIABLES if os.environ.get(v)]
    if configured and not use_configured_services:
        raise fail(
            f"{', '.join(configured)} set: the demo would write its listers, file:// origins "
            "and lister schedule there; unset it to run on throwaway services, or pass "
            "--use-configured-services"
        )
    raise typer.Exit(run_demo(repos, duration, console, archive))


def simulate(
    config: Annotated[Path, typer.Argument(help="world file (.toml or .json)")],
    days: Annotated[float, typer.Option(min=0.1, help="simulated days")] = 30.0,
    out: Annotated[Path, typer.Option(help="folder for report.json and metrics.png")] = Path(
        "simulation"
    ),
    seed: Annotated[int | None, typer.Option(help="replace the world's seed")] = None,
) -> None:
    """Run the scheduler on a simulated world (throwaway PostgreSQL and Redis) and
    write a report of its scheduling quality beside a clairvoyant bound."""
    from app.simulator.command import simulate as run
    from app.simulator.config import ConfigError
    from app.simulator.engine import SimulationError

    with refusing(ConfigError, SimulationError):
        run(config, days, out, seed, console)


ProcfileOption = Annotated[
    Path,
    typer.Option(
        "--procfile",
        "-f",
        help="the Procfile (Procfile.control and Procfile.workers split the default one)",
    ),
]


def _procfile_lines(procfile: Path, names: list[str]) -> list[ProcessLine]:
    with refusing(ProcfileError):
        return select(read_procfile(procfile, os.environ), names)


def up(
    names: Annotated[
        list[str] | None, typer.Argument(help="the processes to run (default: all)")
    ] = None,
    procfile: ProcfileOption = PROCFILE,
) -> None:
    """Run the Procfile's processes, starting again (after a backoff) any that exits,
    until SIGTERM or Ctrl-C."""
    lines = _procfile_lines(procfile, names or [])
    raise typer.Exit(ProcfileRunner(lines, os.environ, sys.stdout).run())


def systemd_units(
    out: Annotated[Path, typer.Option(help="folder to write the units to")],
    names: Annotated[
        list[str] | None, typer.Argument(help="the processes to write units for (default: all)")
    ] = None,
    procfile: ProcfileOption = PROCFILE,
    user: Annotated[
        bool, typer.Option("--user", help="user units (systemctl --user), not system ones")
    ] = False,
) -> None:
    """Write a systemd unit per Procfile process and revisit.target, which starts them
    all; each restarts when it exits and stops with its children. Settings go in
    /etc/revisit/revisit.env (with --user, ~/.config/revisit/revisit.env)."""
    units = _procfile_units(_procfile_lines(procfile, names or []), user=user)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in units.items():
        (out / name).write_text(text)
        say(str(out / name))


def register(app: typer.Typer) -> None:
    """Add the process commands to the root command."""
    app.command("systemd-units")(systemd_units)
    for command in (scheduler, journal, worker, demo, api, simulate, up):
        app.command(command.__name__)(command)
