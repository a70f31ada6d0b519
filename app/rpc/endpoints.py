"""Which endpoints of the reference's RPC protocol revisit serves, and how a call
becomes a response (status, msgpack body), independently of the HTTP server.

Served: the lister interface (``app.listers.interface``), which is what listers
and a frontend's read side call. Not served, each answered with HTTP 501 and
an encoded ``NotImplementedError`` that says why (see ``UNSERVED``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

import psycopg

from app.listers.interface import ListerInterface
from app.listers.models import ListerInputError, StaleData
from app.rpc.codec import UndecodableBody, decode, encode, encode_error

log = logging.getLogger("revisit.rpc")

#: endpoint path -> ListerInterface method (the reference's names).
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
}

_TASKS = (
    "revisit has no generic task table: visits are Dramatiq messages fed from the Redis "
    "pools, and recurrent lister runs are lister schedules (revisit lister schedule)"
)
#: endpoint path -> why revisit does not serve it.
UNSERVED = {
    **{
        path: _TASKS
        for path in (
            "task_type/create",
            "task_type/get",
            "task_type/get_all",
            "task/create",
            "task/set_status",
            "task/disable",
            "task/search",
            "task/get",
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
            "task_run/get",
        )
    },
    "origins/grab_next": (
        "revisit's scheduler process picks visits atomically from the Redis pools and tracks "
        "them in flight; a second picker would bypass that bookkeeping"
    ),
    "visit_stats/upsert": (
        "visit stats are folded from the origin_visit_status journal by revisit's journal "
        "client; a direct write would be undone by the next refold"
    ),
    "visit_scheduler/set": "only revisit's scheduler moves the queue positions",
    "scheduler_metrics/update": "the scheduler process refreshes scheduler_metrics itself",
    "scheduler_metrics/get": (
        "revisit exports these figures to Prometheus (revisit_coverage_*) and keeps them in "
        "the scheduler_metrics table"
    ),
}

_SCHEDULER_EXC = "swh.scheduler.exc"
Response = tuple[int, bytes]


def _bad_input(message: str) -> Response:
    # SchedulerException: the reference's client re-raises it as its own type.
    return 400, encode_error("SchedulerException", _SCHEDULER_EXC, message)


def call(path: str, body: bytes, interface: Callable[[], ListerInterface]) -> Response:
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
    except (ListerInputError, UndecodableBody) as exc:
        return _bad_input(f"{endpoint}: {exc}")
    except StaleData as exc:
        return 400, encode_error("StaleData", _SCHEDULER_EXC, str(exc))
    except psycopg.OperationalError as exc:
        log.warning("%s: database unavailable: %s", endpoint, exc)
        return 503, encode_error("OperationalError", "psycopg", f"database unavailable: {exc}")
    except Exception as exc:
        log.exception("%s failed", endpoint)
        return 500, encode_error(type(exc).__name__, type(exc).__module__, str(exc))
