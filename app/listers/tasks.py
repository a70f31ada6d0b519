"""The reference's task API and its recurrent runner's endpoints, on what revisit has.

``TaskInterface`` is the lister interface plus the methods the archive's other
clients call (``swh.scheduler.interface.SchedulerInterface``, same names and
arguments), so the RPC server serves both from one object. Its task types are
one ``load-<visit type>`` per row of ``visit_types`` and ``list-<lister>-full``
/ ``-incremental`` per installed lister; a task becomes what revisit has:

- a one-shot ``load-<visit type>`` task (save code now): a visit request, its
  priority high / normal / low mapped to ``PRIORITIES``;
- a one-shot ``list-<lister>-full`` task: add forge now (``app.listers.forges``),
  kwargs ``url``, ``instance`` (default: the URL's host) and the lister's arguments;
- a recurring ``list-<lister>-*`` task: its lister instance's schedule;
- any other task is refused with what to do instead.

The ``tasks`` table keeps each task and its request or lister; the task's
reference status is derived from theirs (the ``task_rows`` query). Every
argument is checked before anything is written; a bad one raises
ListerInputError naming it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field, StrictInt, StrictStr

from app.db import lister_api as sql
from app.db import tasks as db
from app.db.connection import DictConnection, in_transaction
from app.db.lister_runs import enable_schedule
from app.db.listings import known_visit_types
from app.db.visit_types import list_visit_types
from app.domain.lister_schedule import ScheduleError
from app.domain.placement import MirrorRow
from app.domain.policies import REGISTRY
from app.inputs.api import AddForge, InvalidPayload, Model, RequestVisit, validated
from app.inputs.rules import check_visit_type
from app.listers.forges import add_forge
from app.listers.interface import ListerInterface, refusing_bad_values
from app.listers.models import (
    Date,
    ListedOrigin,
    ListerInputError,
    OriginVisitStats,
    ReferenceModel,
    checked,
    parse,
)
from app.listers.plugin import UnknownListerPlugin, installed_listers
from app.listers.runs import schedule_lister
from app.services.mirror_sync import place_rows
from app.services.requests import RequestError, cancel_request, create_request
from app.services.scheduling import first_visits_step, schedule_step
from app.services.visit_types import (
    VisitTypeChange,
    VisitTypeError,
    add_listed_visit_types,
    add_visit_type,
)

#: The reference's task priorities, as a request's base priority.
PRIORITIES = {"high": 100, "normal": 0, "low": -100}
LOAD, LIST = "load-", "list-"
LISTING_KINDS = ("full", "incremental")
#: revisit's visit status of each of the reference's last_visit_status values.
STATUS_OF_REFERENCE: dict[str | None, str | None] = {
    None: None,
    "successful": "full",
    "failed": "failed",
    "not_found": "not_found",
}
#: The fields of a task type revisit keeps as declared but does not apply.
UNUSED_TASK_TYPE_FIELDS = ("backend_name", "default_interval", "backoff_factor")
#: The reference's policy of a lister's first visits (grab_next_visits with a lister).
FIRST_VISITS = "first_visits_after_listing"
#: Most origins one grab_next_visits call may take.
MAX_GRAB = 10_000
#: Task ids, one or a list; an id no task can have (beyond bigint) matches none.
TaskIds = Annotated[
    list[StrictInt],
    BeforeValidator(lambda v: v if isinstance(v, list | tuple) else [v]),
    AfterValidator(lambda ids: [i for i in ids if 0 < i < 2**63]),
]
#: One text, or a list of them.
Texts = Annotated[list[StrictStr], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)]
Limit = Annotated[int, Field(strict=True, ge=0)]
_RECURRING = (
    "revisit keeps no recurring load tasks: record the origin with origins/record (a "
    "lister's listed origin) and revisit's scheduler revisits it"
)
_LISTER = (
    "revisit runs its listers on schedules, not tasks: use `revisit lister schedule "
    "{name} INSTANCE --every 1d --incremental-every 1h --arg KEY=VALUE`"
)


class UnknownPolicy(ListerInputError):
    """grab_next_visits named no policy revisit has (the reference's
    ``swh.scheduler.exc.UnknownPolicy``)."""


class TaskType(ReferenceModel):
    """A kind of task (the reference's TaskType)."""

    type: str = Field(min_length=1)
    description: str = ""
    backend_name: str = ""
    default_interval: timedelta | None = None
    min_interval: timedelta | None = None
    max_interval: timedelta | None = None
    backoff_factor: float | None = None
    max_queue_length: int | None = 1000
    num_retries: int | None = None
    retry_delay: timedelta | None = None


class TaskArguments(ReferenceModel):
    """What a task's job is called with."""

    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class Task(ReferenceModel):
    """A task (the reference's Task); its status is derived from its request's."""

    type: str = Field(min_length=1)
    arguments: TaskArguments
    next_run: AwareDatetime
    status: str = "next_run_not_scheduled"
    policy: Literal["recurring", "oneshot"] = "recurring"
    retries_left: int | None = None
    id: int | None = None
    current_interval: timedelta | None = None
    priority: Literal["high", "normal", "low"] | None = None


class TaskRun(ReferenceModel):
    """The run of a task: its request's visit (the reference's TaskRun)."""

    task: int | None
    id: int | None = None
    backend_id: str | None = None
    scheduled: datetime | None = None
    started: datetime | None = None
    ended: datetime | None = None
    metadata: dict[str, Any] | None = None
    status: str = "scheduled"


class SchedulerMetrics(ReferenceModel):
    """Coverage of one lister instance and visit type (the reference's SchedulerMetrics)."""

    lister_id: UUID
    visit_type: str
    last_update: datetime | None = None
    origins_known: int = 0
    origins_enabled: int = 0
    origins_never_visited: int = 0
    origins_with_pending_changes: int = 0


@dataclass(frozen=True)
class ListerTaskSchedule:
    """What a recurring ``list-<lister>-full|incremental`` task asks of its lister's
    schedule: the arguments of ``schedule_lister``."""

    name: str
    instance_name: str
    arguments: dict[str, Any] | None  # None: those already scheduled
    full_interval: timedelta | None
    incremental_interval: timedelta | None
    first_run: datetime


def _plan(task: Task, known: set[str], field: str) -> ListerTaskSchedule | RequestVisit | AddForge:
    """What a task becomes: a recurring lister task its lister's schedule, a one-shot
    ``list-<lister>-full`` add forge now, a one-shot ``load-<visit type>`` task a
    visit request; any other is refused with what to do instead."""
    if task.type.startswith(LIST):
        name, _, kind = task.type[len(LIST) :].rpartition("-")
        if task.policy == "recurring":
            return _as_schedule(task, name, kind, field)
        if kind == "full":
            return _as_forge(task, name, field)
        raise ListerInputError(f"{field}.type: {task.type}: " + _LISTER.format(name=name or kind))
    visit_type = task.type[len(LOAD) :] if task.type.startswith(LOAD) else None
    if visit_type not in known:
        names = ", ".join(LOAD + name for name in sorted(known))
        raise ListerInputError(f"{field}.type: unknown task type {task.type!r} (known: {names})")
    if task.policy != "oneshot":
        raise ListerInputError(f"{field}.policy: {task.policy}: {_RECURRING}")
    if task.arguments.args:
        raise ListerInputError(f"{field}.arguments.args: revisit's loaders take kwargs only")
    url, kwargs = _url_and_kwargs(task, field, "origin")
    priority = PRIORITIES[task.priority or "normal"]
    fields = {"url": url, "visit_type": visit_type, "priority": priority}
    return _validated(RequestVisit, fields | {"extra_loader_arguments": kwargs}, field)


def _as_schedule(task: Task, name: str, kind: str, field: str) -> ListerTaskSchedule:
    """A recurring lister task as a lister schedule: the kwargs are the lister's
    arguments (none: those already scheduled), but ``instance``, its instance's
    name; the interval is the task's ``current_interval`` (a full listing
    defaults to a day)."""
    if kind not in LISTING_KINDS or not name:
        raise ListerInputError(
            f"{field}.type: {task.type}: expected list-<lister>-full or list-<lister>-incremental"
        )
    if task.arguments.args:
        raise ListerInputError(f"{field}.arguments.args: revisit's listers take kwargs only")
    arguments = dict(task.arguments.kwargs)
    instance = arguments.pop("instance", "")
    if not isinstance(instance, str):
        raise ListerInputError(f"{field}.arguments.kwargs.instance: expected a string")
    interval = task.current_interval
    if kind == "incremental" and interval is None:
        raise ListerInputError(f"{field}.current_interval: required for an incremental lister task")
    full, incremental = (interval, None) if kind == "full" else (None, interval)
    return ListerTaskSchedule(name, instance, arguments or None, full, incremental, task.next_run)


class TaskInterface(ListerInterface):
    """The lister interface, the task API and the runner's endpoints on one
    connection (autocommit) and the process's Redis mirror."""

    def get_task_types(self) -> list[TaskType]:
        """``load-<visit type>`` for every visit type, ``list-<lister>-full`` and
        ``-incremental`` for every installed lister."""
        declared = db.declared_task_types(self.conn)
        loads = [
            _declared(
                TaskType(
                    type=LOAD + r["name"],
                    description=r["description"] or f"Visit a {r['name']} origin",
                    backend_name=f"visit.{r['name']}",
                    min_interval=timedelta(seconds=float(r["min_interval_s"])),
                    max_interval=timedelta(seconds=float(r["max_interval_s"])),
                    max_queue_length=int(r["max_queue_length"]),
                    num_retries=int(r["num_retries"]),
                    retry_delay=timedelta(seconds=float(r["retry_delay_s"])),
                ),
                declared.get(r["name"]),
            )
            for r in list_visit_types(self.conn)
        ]
        lists = [
            TaskType(
                type=f"{LIST}{name}-{kind}",
                description=f"A {kind} listing by revisit's {name} lister",
                backend_name=f"revisit.listers.{name}",
            )
            for name in installed_listers()
            for kind in LISTING_KINDS
        ]
        return loads + lists

    def get_task_type(self, task_type_name: str) -> TaskType | None:
        """The task type of that name, or None."""
        return next((t for t in self.get_task_types() if t.type == task_type_name), None)

    @checked
    def create_task_type(self, task_type: TaskType) -> None:
        """Create the visit type of a ``load-<visit type>`` task type (an existing
        one is left as it is); other task types are refused."""
        if not task_type.type.startswith(LOAD):
            raise ListerInputError(
                f"task_type.type: {task_type.type!r}: revisit creates only load-<visit type> task "
                "types (listers are installed plugins: their task types come with them)"
            )
        name = task_type.type[len(LOAD) :]
        if name in known_visit_types(self.conn):
            return
        try:
            change = validated(
                VisitTypeChange,
                {
                    "name": name,
                    "description": task_type.description or None,
                    "min_interval_s": _seconds(task_type.min_interval),
                    "max_interval_s": _seconds(task_type.max_interval),
                    "max_queue_length": task_type.max_queue_length,
                    "num_retries": task_type.num_retries,
                    "retry_delay_s": _seconds(task_type.retry_delay),
                },
            )
            with self.conn.transaction():
                add_visit_type(self.conn, change)
                db.declare_task_type(self.conn, name, task_type.model_dump(mode="json"))
        except (InvalidPayload, VisitTypeError) as exc:
            raise ListerInputError(f"task_type: {exc}") from None

    @checked
    def create_tasks(self, tasks: list[Any], policy: str = "recurring") -> list[Task]:
        """Make each one-shot load task a visit request, each recurring lister
        task its lister's schedule (all or none); the tasks created."""
        known = known_visit_types(self.conn)
        parsed = [parse(Task, task, f"tasks[{i}]") for i, task in enumerate(tasks)]
        plans = [_plan(t, known, f"tasks[{i}]") for i, t in enumerate(parsed)]
        ids: list[int] = []
        with self.conn.transaction():
            for i, (task, plan) in enumerate(zip(parsed, plans, strict=True)):
                fields = {
                    "type": task.type,
                    "arguments": task.arguments.model_dump(),
                    "next_run": task.next_run,
                    "priority": task.priority,
                    "retries_left": task.retries_left,
                }
                if isinstance(plan, ListerTaskSchedule):
                    lister_id = self._schedule(plan, f"tasks[{i}]")
                    fields["policy"] = "recurring"
                    ids.append(db.insert_task(self.conn, fields, lister_id=lister_id))
                    continue
                try:
                    if isinstance(plan, AddForge):
                        request_id = add_forge(self.conn, plan, self.clock())
                    else:
                        request_id = create_request(self.conn, plan, now=self.clock())
                except RequestError as exc:
                    raise ListerInputError(f"tasks: {exc}") from None
                ids.append(db.insert_task(self.conn, fields, request_id))
        return self.get_tasks(ids)

    def _schedule(self, plan: ListerTaskSchedule, field: str) -> UUID:
        """Create or change the lister instance's schedule (``revisit lister schedule``)."""
        try:
            return schedule_lister(self.conn, now=self.clock(), **vars(plan)).lister_id
        except (ScheduleError, UnknownListerPlugin) as exc:
            raise ListerInputError(f"{field}: {exc}") from None

    @checked
    def get_tasks(self, task_ids: TaskIds) -> list[Task]:
        """The tasks of these ids (unknown ones are left out)."""
        rows = db.task_rows(self.conn, ids=task_ids) if task_ids else []
        return [Task.model_validate(r) for r in rows]

    @checked
    def search_tasks(
        self,
        task_id: TaskIds | None = None,
        task_type: Texts | None = None,
        status: Texts | None = None,
        priority: Texts | None = None,
        policy: Literal["oneshot", "recurring"] | None = None,
        before: Date | None = None,
        after: Date | None = None,
        limit: Limit | None = None,
    ) -> list[Task]:
        """Tasks matching every criterion given, in id order."""
        rows = db.task_rows(
            self.conn,
            ids=task_id or None,
            types=task_type,
            statuses=status,
            priorities=priority,
            policy=policy,
            before=before,
            after=after,
            limit=limit or None,
        )
        return [Task.model_validate(r) for r in rows]

    @checked
    def get_task_runs(self, task_ids: TaskIds, limit: Limit | None = None) -> list[TaskRun]:
        """The run of each of these tasks that has been sent to a worker."""
        if not task_ids:
            return []
        rows = db.task_rows(self.conn, ids=task_ids)
        runs = [_run(r) for r in rows if r["run_status"] is not None]
        return runs[:limit] if limit else runs

    @checked
    def disable_tasks(self, task_ids: TaskIds) -> None:
        """Cancel the requests of these tasks (those already done stay as they
        are); pause the schedules of lister tasks (`revisit lister resume`)."""
        rows = db.task_rows(self.conn, ids=task_ids)
        namespace = self.ctx.settings.redis_namespace
        for row in rows:
            if row["lister_id"] is not None:
                enable_schedule(self.conn, row["lister_id"], False)
            elif row["request_status"] in ("pending", "scheduled"):
                cancel_request(
                    self.conn, self.ctx.redis, namespace, row["request_id"], self.clock()
                )

    @checked
    def grab_next_visits(
        self,
        visit_type: str,
        count: Annotated[int, Field(strict=True, ge=0, le=MAX_GRAB)],
        policy: str,
        enabled: bool = True,
        lister_uuid: UUID | None = None,
        lister_name: str | None = None,
        lister_instance_name: str | None = None,
        timestamp: Date | None = None,
        absolute_cooldown: timedelta | None = None,
        scheduled_cooldown: timedelta | None = None,
        failed_cooldown: timedelta | None = None,
        not_found_cooldown: timedelta | None = None,
        tablesample: float | None = None,
        dry_run: bool = False,
    ) -> list[ListedOrigin]:
        """Take up to ``count`` origins of ``visit_type`` by ``policy`` as revisit's
        scheduler does (stamped scheduled, in flight in the mirror), and return
        them. revisit's own cooldowns apply; ``tablesample`` is not needed. With
        a lister (``lister_uuid``, or ``lister_name`` and ``lister_instance_name``),
        its first visits: its origins not scheduled since its last listing, as
        revisit's first_visits_after_listing policy picks them, whatever the
        policy named (the reference's first-visits runner names that one)."""
        if policy not in REGISTRY and policy != FIRST_VISITS:
            known = ", ".join(sorted([*REGISTRY, FIRST_VISITS]))
            raise UnknownPolicy(f"policy: unknown policy {policy!r} (known: {known})")
        if visit_type not in known_visit_types(self.conn):
            raise ListerInputError(f"visit_type: unknown visit type {visit_type!r}")
        if enabled is not True:
            raise ListerInputError("enabled: revisit schedules enabled origins only")
        now = timestamp or self.clock()
        if lister_uuid or lister_name or lister_instance_name or policy == FIRST_VISITS:
            lister = self._grab_lister(lister_uuid, lister_name, lister_instance_name)
            if lister is None:
                return []
            if dry_run:
                raise ListerInputError("dry_run: not with a lister (its first visits)")
            orders, _ = first_visits_step(self.conn, self.ctx, visit_type, lister, count, now)
            lister_id = lister["id"]
        else:
            result = schedule_step(
                self.conn, self.ctx, visit_type, count, now, {policy: 1.0}, dry_run=bool(dry_run)
            )
            orders, lister_id = result.orders, None
        pairs = [(o.url, o.visit_type) for o in orders]
        rows = db.listed_origins_of(self.conn, pairs, lister_id)
        listed = {(r["url"], r["visit_type"]): r for r in rows}
        return [ListedOrigin.model_validate(listed[p]) for p in pairs if p in listed]

    def _grab_lister(
        self, lister_uuid: UUID | None, name: Any, instance_name: Any
    ) -> dict[str, Any] | None:
        """The lister whose first visits grab_next_visits takes (None: not registered)."""
        if lister_uuid:
            found = sql.listers_by_id(self.conn, [lister_uuid])
            return found[0] if found else None
        if not isinstance(name, str) or not name:
            raise ListerInputError(
                "lister_uuid or lister_name: required to grab a lister's first visits"
            )
        return sql.lister_by_name(self.conn, name, instance_name or "")

    @checked
    def visit_scheduler_queue_position_set(
        self, visit_type: str, position: Annotated[int, Field(strict=True, ge=0, lt=2**35)]
    ) -> None:
        """Set the recurrent scheduler's queue position of ``visit_type`` (Unix
        seconds); a visit type revisit does not know is created paused."""
        name = _visit_type(visit_type, "visit_type")
        with self.conn.transaction():
            add_listed_visit_types(self.conn, {name}, self.clock())
            db.set_queue_position(self.conn, name, position)

    def origin_visit_stats_upsert(self, origin_visit_stats: Iterable[Any]) -> None:
        """Write the given fields of each origin's stats (None keeps the stored
        value; a later entry of the same origin wins), then place the origins in
        the mirror. A visit type revisit does not know is created paused. The
        journal's next final status of an origin refolds its stats from its
        visit history."""
        given = [
            parse(OriginVisitStats, s, f"origin_visit_stats[{i}]")
            for i, s in enumerate(origin_visit_stats or [])
        ]
        for i, stats in enumerate(given):
            _visit_type(stats.visit_type, f"origin_visit_stats[{i}].visit_type")
        # In byte order of the key, as the journal locks rows (a stable sort: a
        # later entry of an origin is still written last).
        rows = sorted(
            (
                s.model_dump() | {"last_visit_status": STATUS_OF_REFERENCE[s.last_visit_status]}
                for s in given
            ),
            key=itemgetter("url", "visit_type"),
        )
        now = self.clock()

        def write(conn: DictConnection) -> list[MirrorRow]:
            add_listed_visit_types(conn, {s.visit_type for s in given}, now)
            return db.upsert_visit_stats(conn, rows)

        # A deadlock with a scheduling step (which stamps rows by id) is run again.
        written = refusing_bad_values(
            lambda: in_transaction(self.conn, write), "origin_visit_stats"
        )
        place_rows(self.ctx, written, now)

    @checked
    def get_metrics(
        self, lister_id: UUID | None = None, visit_type: str | None = None
    ) -> list[SchedulerMetrics]:
        """The coverage figures of ``scheduler_metrics`` (of one lister, one visit type)."""
        rows = db.scheduler_metrics(self.conn, lister_id, visit_type)
        return [SchedulerMetrics.model_validate(r) for r in rows]


def _declared(live: TaskType, declared: dict[str, Any] | None) -> TaskType:
    """The task type of a visit type as its client declared it, if one did: the
    fields revisit has no use for as declared, the others as the visit type has
    them, except those declared unset (revisit applies its defaults to those)."""
    if declared is None:
        return live
    given = TaskType.model_validate(declared)
    fields = {name: getattr(given, name) for name in UNUSED_TASK_TYPE_FIELDS}
    fields |= {name: None for name in type(given).model_fields if getattr(given, name) is None}
    return live.model_copy(update=fields)


def _visit_type(name: Any, field: str) -> str:
    try:
        return check_visit_type(name if isinstance(name, str) else "")
    except ValueError as exc:
        raise ListerInputError(f"{field}: {exc}") from None


def _as_forge(task: Task, lister: str, field: str) -> AddForge:
    """A one-shot full listing task as add forge now: kwargs ``url`` (the forge's),
    ``instance`` (default: the URL's host), the others the lister's arguments."""
    url, kwargs = _url_and_kwargs(task, field, "forge")
    instance = kwargs.pop("instance", None) or urlsplit(url).hostname or url
    fields = {"lister": lister, "instance": instance, "url": url, "arguments": kwargs}
    if task.priority is not None:
        fields["priority"] = PRIORITIES[task.priority]
    return _validated(AddForge, fields, field)


def _url_and_kwargs(task: Task, field: str, whose: str) -> tuple[str, dict[str, Any]]:
    """The task's required ``url`` kwarg (the ``whose``'s URL) and its other kwargs."""
    kwargs = dict(task.arguments.kwargs)
    url = kwargs.pop("url", None)
    if not isinstance(url, str):
        raise ListerInputError(f"{field}.arguments.kwargs.url: required, the {whose}'s URL")
    return url, kwargs


def _validated(model: type[Model], fields: dict[str, Any], field: str) -> Model:
    """``fields`` of a task's request, checked as ``model``."""
    try:
        return validated(model, fields | {"requested_by": "task API"})
    except InvalidPayload as exc:
        raise ListerInputError(f"{field}.arguments: {exc}") from None


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


def _run(row: dict[str, Any]) -> TaskRun:
    metadata = {
        "request_id": row["request_id"],
        "request_status": row["request_status"],
        "visit": row["visit"],
        "visit_status": row["visit_status"],
        "failure_reason": row["failure_reason"],
    }
    return TaskRun(
        task=row["id"],
        id=row["id"],
        backend_id=f"revisit-request-{row['request_id']}",
        scheduled=row["scheduled_at"],
        started=row["started_at"],
        ended=row["finished_at"],
        metadata=metadata,
        status=row["run_status"],
    )
