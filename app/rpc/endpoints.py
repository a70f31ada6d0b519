"""Which endpoints of the reference's RPC protocol revisit serves, and how a call
becomes a response (status, msgpack body), independently of the HTTP server.

Served: the lister interface (``app.listers.interface``), which is what listers
and a frontend's read side call, and the task API subset the archive's web
frontend and recurrent runner call (``app.listers.tasks``). Not served, each
answered with HTTP 501 and an encoded ``NotImplementedError`` that says why
(see ``UNSERVED``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from uuid import UUID

import psycopg

from app.listers.models import Date, ListerInputError, StaleData, checked
from app.listers.tasks import SchedulerMetrics, TaskInterface, UnknownPolicy
from app.rpc.codec import UndecodableBody, decode, encode, encode_error
from monitoring.coverage import ACTIVE_WINDOW_S, NEVER_VISITED_THRESHOLD_S, refresh_coverage

log = logging.getLogger("revisit.rpc")

#: endpoint path -> RpcInterface method (the reference's names).
SERVED = {
    "listers/get": "get_listers",
    "listers/get_by_id": "get_listers_by_id",
    "lister/get": "get_lister",
    "lister/get_or_create": "get_or_create_lister",
    "lister/update": "update_lister",
    "origins/record": "record_listed_origins",
    "origins/get": "get_listed_origins",
    "lister/visit_types": "get_visit_types_for_listed_origins",
    "visit_stats/get": "origin_visit_stats_get",
    "visit_scheduler/get": "visit_scheduler_queue_position_get",
    # the task API and the runner's endpoints (app.listers.tasks)
    "task_type/create": "create_task_type",
    "task_type/get": "get_task_type",
    "task_type/get_all": "get_task_types",
    "task/create": "create_tasks",
    "task/get": "get_tasks",
    "task/search": "search_tasks",
    "task/disable": "disable_tasks",
    "task_run/get": "get_task_runs",
    "origins/grab_next": "grab_next_visits",
    "visit_scheduler/set": "visit_scheduler_queue_position_set",
    "visit_stats/upsert": "origin_visit_stats_upsert",
    "scheduler_metrics/update": "update_metrics",
    "scheduler_metrics/get": "get_metrics",
}

_RUNNER = (
    "revisit runs the tasks it accepts itself: a one-shot load task becomes a visit "
    "request that its priority workers serve, so there is no task queue for a runner to "
    "grab from or report to (follow a task with task/get and task_run/get)"
)
#: endpoint path -> why revisit does not serve it.
UNSERVED = {
    path: _RUNNER
    for path in (
        "task/set_status",
        "task/peek_ready",
        "task/grab_ready",
        "task/peek_ready_with_priority",
        "task/grab_ready_with_priority",
        "task_run/schedule_one",
        "task_run/schedule",
        "task_run/start",
        "task_run/end",
        "task/filter_for_archive",
        "task/delete_archived",
    )
}

_SCHEDULER_EXC = "swh.scheduler.exc"
Response = tuple[int, bytes]


class RpcInterface(TaskInterface):
    """TaskInterface and what needs the monitoring layer: ``update_metrics``."""

    @checked
    def update_metrics(
        self, lister_id: UUID | None = None, timestamp: Date | None = None
    ) -> list[SchedulerMetrics]:
        """Refresh ``scheduler_metrics`` now (or at ``timestamp``) as the scheduler
        process does every minute; the figures (of one lister instance)."""
        now = timestamp or self.clock()
        refresh_coverage(self.conn, now, ACTIVE_WINDOW_S, NEVER_VISITED_THRESHOLD_S)
        return self.get_metrics(lister_id)


def unavailable(exc: psycopg.OperationalError) -> Response:
    """503: PostgreSQL is unreachable (the reference's client retries)."""
    log.warning("database unavailable: %s", exc)
    return 503, encode_error("OperationalError", "psycopg", f"database unavailable: {exc}")


def call(path: str, body: bytes, interface: Callable[[], RpcInterface]) -> Response:
    """Answer one POST to ``path``: 200 and the result, 400 for bad input or stale
    data, 404 for an unknown path, 501 for an endpoint revisit does not serve,
    503 when PostgreSQL is unreachable (the reference's client retries those)."""
    endpoint = path.strip("/")
    if endpoint in UNSERVED:
        message = f"{endpoint}: not served by revisit: {UNSERVED[endpoint]}"
        return 501, encode_error("NotImplementedError", "builtins", message)
    if endpoint not in SERVED:
        return 404, encode_error("LookupError", "builtins", f"{endpoint}: no such endpoint")
    try:
        arguments = decode(body) if body else {}
        if not isinstance(arguments, dict):
            raise UndecodableBody("body: expected a map of the method's arguments")
        method = getattr(interface(), SERVED[endpoint])
        try:
            inspect.signature(method).bind(**arguments)
        except TypeError as exc:
            raise ListerInputError(f"{endpoint}: {exc}") from None
        return 200, encode(method(**arguments))
    except UnknownPolicy as exc:
        return 400, encode_error("UnknownPolicy", _SCHEDULER_EXC, f"{endpoint}: {exc}")
    except (ListerInputError, UndecodableBody) as exc:
        # SchedulerException: the reference's client re-raises it as its own type.
        return 400, encode_error("SchedulerException", _SCHEDULER_EXC, f"{endpoint}: {exc}")
    except StaleData as exc:
        return 400, encode_error("StaleData", _SCHEDULER_EXC, str(exc))
    except psycopg.OperationalError as exc:
        return unavailable(exc)
    except Exception as exc:
        log.exception("%s failed", endpoint)
        return 500, encode_error(type(exc).__name__, type(exc).__module__, str(exc))
