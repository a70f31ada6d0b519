"""The archive's own loaders (swh-loader-git, swh-loader-mercurial...) as revisit loaders.

A plugin runs the archive's loader class (found through the archive's
``swh.workers`` entry points) on the origin's URL with its
``extra_loader_arguments``, against the storage of the archive's own loader
configuration: the YAML file named by ``SWH_CONFIG_FILENAME``, its
``storage:`` key (``cls: remote`` in production; ``memory`` or ``postgresql``
with a ``journal_writer`` in tests). The archive's storage, not the worker,
publishes the visit's statuses to the journal, with its own visit numbers:
these loaders say ``publishes_statuses = False`` and the worker publishes
nothing for them.

Each visit runs in a child process, killed (its process group) at the lane's
time limit: the archive's loaders block in C (svn), clear ``os.environ`` (hg)
and have no I/O timeout (git://), so a thread could not be stopped. The child
is forked by the worker process's fork server (``app.loaders.zygote``), which
imported the archive's packages once, so a visit does not pay their import.

The outcome is the archive's final visit status, read by a proxy of the
storage as the loader writes it (``load()``'s return value says ``uneventful``
for a missing repository). A visit the archive recorded but
that never got a final status (killed at the time limit, crashed) is closed
``failed`` in the archive, so the journal reports it and nothing stays
ongoing; a visit the archive never recorded (storage down) is published by
no one: the worker retries it, and the scheduler takes the origin back after
its cooldown.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import IO, Any, ClassVar

from app.domain.visit_status import FINAL_STATUSES
from app.inputs.rules import check_url
from app.loaders.base import MAX_ERROR_CHARS, VisitResult
from app.loaders.below import Held, nameservers
from app.loaders.git import SCHEMES as GIT_SCHEMES
from app.loaders.git import resolved_addresses, url_scheme
from app.loaders.outbound import hold_connections_to_rules, service_addresses, service_hosts
from app.loaders.subversion import CheckingProxy, Reach, subversion_held
from app.loaders.zygote import KILL_WAIT_S, Forked, ForkServer, ShuttingDown, ZygoteGone, serve

#: The archive's variable naming its loaders' configuration (YAML, ``storage:`` key).
CONFIG_VARIABLE = "SWH_CONFIG_FILENAME"
#: The archive's entry point group of its workers (``ep.load()()["loader"]``).
SWH_WORKERS_GROUP = "swh.workers"
#: Stop the child this long before the lane's limit, so the worker reports the
#: time-out before Dramatiq's time limit interrupts it.
KILL_MARGIN_S = 1.0
#: Longest reason kept from the archive's loader (its errors quote whole URLs and paths).
REASON_CHARS = min(300, MAX_ERROR_CHARS)
#: Longest wait for the child to close an unfinished visit in the archive.
CLOSE_TIMEOUT_S = 30.0

log = logging.getLogger("revisit.loaders.archive")


@dataclass(frozen=True)
class ArchiveLoader:
    """Runs the archive's loader registered as ``swh_worker`` in ``swh.workers`` on
    URLs of ``schemes`` (``file`` only where the URL rules allow it)."""

    publishes_statuses: ClassVar[bool] = False
    swh_worker: str
    schemes: frozenset[str]

    def load(self, url: str, arguments: dict[str, Any], timeout_s: float) -> VisitResult:
        """Visit ``url`` with the archive's loader in a child process; the result is
        the archive's final status of the visit (the journal already has it)."""
        started = time.monotonic()
        refused = self.refuse(url)
        if refused is not None:
            return VisitResult("failed", None, 0.0, refused)
        if not os.environ.get(CONFIG_VARIABLE):
            return VisitResult(
                "failed", None, 0.0, f"{CONFIG_VARIABLE}: not set (the archive's loader config)"
            )
        request = json.dumps({"worker": self.swh_worker, "url": url, "arguments": arguments})
        try:
            with _child("visit", request) as child:
                try:
                    out, err = child.communicate(timeout=max(0.1, timeout_s - KILL_MARGIN_S))
                    timed_out = False
                except subprocess.TimeoutExpired:
                    out, err = _kill(child)
                    timed_out = True
        except (ShuttingDown, ZygoteGone) as exc:
            # Not started: nothing reached the archive, worth retrying.
            return VisitResult("failed", None, time.monotonic() - started, str(exc), transient=True)
        duration = time.monotonic() - started
        report = _report(out)
        visit = report.get("visit")
        status = report.get("status")
        if not timed_out and status in FINAL_STATUSES:
            reason = report.get("error") if status in ("failed", "not_found") else None
            snapshot = bytes.fromhex(report["snapshot"]) if report.get("snapshot") else None
            return VisitResult(status, snapshot, duration, _short(reason), archived=True)
        if timed_out:
            error = "timeout"
        elif FORK_SERVER.stopping:
            error = "stopped: the worker is shutting down"
        else:
            error = report.get("error") or _last_line(err)
        # The archive has the visit without a final status: close it, so its
        # journal reports the failure (an ongoing visit would hold a request).
        closed = visit is not None and _close(url, int(visit), str(report.get("visit_type", "")))
        # Nothing reached the archive: worth retrying (a storage that is down).
        transient = visit is None and not timed_out
        return VisitResult(
            "failed",
            None,
            duration,
            _short(error) or f"the archive's loader exited {child.returncode}",
            transient=transient,
            timed_out=timed_out,
            archived=closed,
        )

    def refuse(self, url: str) -> str | None:
        """Why ``url`` is not visited, or None: a scheme the loader does not take, a
        URL the rules refuse (app.inputs.rules: a ``file://`` URL unless ``localhost``
        is allowed; bare local paths never), or a host resolving to an internal
        address. The archive's loader connects by itself, so the addresses are
        checked here, before the child starts, and every connection of the
        child again (``app.loaders.outbound``): a redirect cannot lead inside."""
        scheme = url_scheme(url)
        if scheme not in self.schemes:
            allowed = ", ".join(sorted(self.schemes))
            return f"url: scheme {scheme!r} not allowed ({allowed})"
        try:
            check_url(url)
            resolved_addresses(url, scheme)
        except ValueError as exc:
            message = str(exc)
            return message if message.startswith("url: ") else f"url: {message}"
        except OSError:
            return None  # the archive's loader reports the name that does not resolve
        return None


_WEB = frozenset({"https", "http", "file"})
#: The archive's loaders as revisit loaders: plugin (its ``revisit.loaders`` entry
#: point) → the archive's worker and the URL schemes it visits. The checkout and
#: export loaders take one ref, path or tarball as a directory (``ref``,
#: ``checksum_layout``, ``checksums`` arguments).
PLUGINS: dict[str, tuple[str, frozenset[str]]] = {
    "swh-git": ("loader.git", GIT_SCHEMES),
    "swh-hg": ("loader.mercurial", _WEB),
    "swh-svn": ("loader.svn", _WEB | {"svn"}),
    "swh-git-checkout": ("loader.git-checkout", GIT_SCHEMES),
    "swh-hg-checkout": ("loader.mercurial-checkout", _WEB),
    "swh-svn-export": ("loader.svn-export", _WEB | {"svn"}),
    "swh-tarball-directory": ("loader.directory", _WEB),
}


def plugin(name: str) -> Callable[[], ArchiveLoader]:
    """The loader factory of the entry point ``name``."""
    return partial(ArchiveLoader, *PLUGINS[name])


# What the entry points in pyproject.toml name.
ArchiveGitLoader = plugin("swh-git")
ArchiveHgLoader = plugin("swh-hg")
ArchiveSvnLoader = plugin("swh-svn")
ArchiveGitCheckoutLoader = plugin("swh-git-checkout")
ArchiveHgCheckoutLoader = plugin("swh-hg-checkout")
ArchiveSvnExportLoader = plugin("swh-svn-export")
ArchiveTarballDirectoryLoader = plugin("swh-tarball-directory")

#: The archive's workers the plugins run: what the fork server imports once.
SWH_WORKERS = tuple(worker for worker, _ in PLUGINS.values())


#: The fork server of this worker process (started at its first visit).
FORK_SERVER_ARGV = [sys.executable, "-m", "app.loaders.archive", "zygote"]
FORK_SERVER = ForkServer(FORK_SERVER_ARGV)


def stop_children() -> None:
    """Kill the running visits' children and start no new visit: the worker is
    shutting down (a visit the archive recorded is still closed failed)."""
    FORK_SERVER.stop_children()


@contextmanager
def _child(command: str, request: str) -> Iterator[Forked]:
    """The child of ``command`` on ``request``, forked by the fork server; killed
    (its whole process group) if it outlives the block, e.g. when Dramatiq's time
    limit interrupts it."""
    child = FORK_SERVER.spawn(command, request, when_stopping=command == "close")
    try:
        yield child
    finally:
        child.close()


def _kill(child: Forked) -> tuple[str, str]:
    """Kill ``child``; what it wrote (nothing more if a process it left keeps its
    pipes open)."""
    child.kill()
    try:
        return child.communicate(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        return "", ""


def _close(url: str, visit: int, visit_type: str) -> bool:
    """Record the archive's visit ``visit`` of ``url`` failed (best effort): whether
    the archive took it."""
    request = json.dumps({"url": url, "visit": visit, "visit_type": visit_type})
    try:
        with _child("close", request) as child:
            try:
                _, err = child.communicate(timeout=CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                err = "timeout"
    except ZygoteGone as exc:
        log.warning("could not close visit %d of %s in the archive: %s", visit, url, exc)
        return False
    if child.returncode != 0:
        log.warning("could not close visit %d of %s in the archive: %s", visit, url, err[-300:])
    return child.returncode == 0


def _report(out: str) -> dict[str, Any]:
    """The child's last word on each key: one JSON object a line on its stdout."""
    report: dict[str, Any] = {}
    for line in out.splitlines():
        try:
            report.update(json.loads(line))
        except (ValueError, TypeError):
            continue
    return report


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _short(error: object) -> str | None:
    """A one-line reason: an exception's text without the traceback some carry
    (swh-loader-mercurial's NotFound), its first line, bounded."""
    if error is None:
        return None
    text = str(error).split("Traceback", 1)[0].strip().splitlines()
    return (text[0].rstrip(" ,'\"") if text else "")[:REASON_CHARS] or None


# The fork server (``python -m app.loaders.archive zygote FD``) and its children:
# a child's request comes as JSON, its report goes as JSON lines on its report
# pipe (the loaders' own output goes to its stderr).


class _Recorder:
    """A proxy of the archive's storage that reports the visit the loader adds and
    its last status, as the storage accepted them."""

    def __init__(self, storage: Any, report: IO[str]) -> None:
        self._storage = storage
        self._report = report

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def origin_visit_add(self, visits: list[Any]) -> Any:
        added = self._storage.origin_visit_add(visits)
        for v in added:
            _say(self._report, visit=v.visit, visit_type=v.type)
        return added

    def origin_visit_status_add(self, statuses: list[Any]) -> Any:
        result = self._storage.origin_visit_status_add(statuses)
        for s in statuses:
            snapshot = s.snapshot.hex() if s.snapshot is not None else None
            _say(self._report, status=s.status, snapshot=snapshot)
        return result


class _LastError(logging.Handler):
    """Keeps the exception of the last record logged with one: the loader's reason."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.error: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            self.error = _describe(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _say(report: IO[str], **fields: Any) -> None:
    report.write(json.dumps(fields) + "\n")
    report.flush()


def _config() -> dict[str, Any]:
    from swh.core.config import read

    config: dict[str, Any] = read(os.environ[CONFIG_VARIABLE])
    if not isinstance(config.get("storage"), dict):
        raise ValueError(f"{CONFIG_VARIABLE}: no storage: section")
    return config


def _storage(config: dict[str, Any]) -> Any:
    from swh.storage import get_storage

    return get_storage(**config["storage"])


def _loader_class(worker: str) -> Any:
    from importlib.metadata import entry_points

    for ep in entry_points(group=SWH_WORKERS_GROUP):
        if ep.name == worker:
            return ep.load()()["loader"]
    raise LookupError(f"the archive's {worker} is not installed")


def _visit(request: dict[str, Any], report: IO[str]) -> None:
    errors = _LastError()
    logging.getLogger().addHandler(errors)
    reach = Reach()
    below: Held | None = None
    proxy: CheckingProxy | None = None
    try:
        config = _config()
        below = Held(hold_connections_to_rules(request["url"], config))  # before any thread
        with subversion_held(reach) as proxy:
            # What connects from C (Subversion) and the programs started, held to
            # the same rules, the proxy and the resolver let through.
            below.start([("127.0.0.1", proxy.port), *nameservers()])
            storage = _Recorder(_storage(config), report)
            loader = _loader_class(request["worker"])(
                storage=storage, url=request["url"], **request["arguments"]
            )
            # Where the svn loaders mount their local copies (file:// URLs).
            reach.local_roots.append(str(getattr(loader, "temp_directory", "")))
            loader.load()
    except Exception as exc:
        errors.error = _describe(exc)
    # Why Subversion or a program failed, if it did: what it was refused.
    refused = [f"{r} (asked by Subversion)" for r in (proxy.refused if proxy else [])]
    refused += [f"{r} (asked from C or by a program)" for r in (below.refused() if below else [])]
    if refused:
        errors.error = refused[0]
    if errors.error:
        _say(report, error=errors.error)


def _close_visit(request: dict[str, Any]) -> None:
    from swh.model.model import OriginVisitStatus

    storage = _storage(_config())
    status = OriginVisitStatus(
        origin=request["url"],
        visit=request["visit"],
        date=datetime.now(UTC),
        type=request["visit_type"] or None,
        status="failed",
        snapshot=None,
    )
    storage.origin_visit_status_add([status])
    storage.flush()


def _run(command: str, request: dict[str, Any], report: IO[str]) -> None:
    """A child's work, ``visit`` or ``close``: its report as JSON lines on ``report``."""
    if command == "visit":
        _visit(request, report)
    elif command == "close":
        _close_visit(request)
    else:
        raise ValueError(f"unknown command {command!r}")


def _preload() -> None:
    """Import what every child needs (the storage and the installed loaders) and
    resolve the services the loader configuration names, once for them all."""
    import swh.core.config
    import swh.model.model
    import swh.storage
    import swh.storage.api.client  # noqa: F401

    for worker in SWH_WORKERS:
        with suppress(Exception):
            _loader_class(worker)
    with suppress(Exception):  # a configuration it cannot read is each visit's to report
        service_addresses(service_hosts(_config()))


def main(argv: list[str]) -> int:
    """The fork server's entry: ``python -m app.loaders.archive zygote FD``."""
    if len(argv) != 2 or argv[0] != "zygote" or not argv[1].isdigit():
        print(f"usage: python -m app.loaders.archive zygote FD, not {argv}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return serve(int(argv[1]), _preload, _run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
