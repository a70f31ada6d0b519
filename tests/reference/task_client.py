"""The archive's other clients through the reference scheduler's own client: the web
frontend's save code now (task API) and the recurrent runner (grab_next).

Run with the reference's interpreter (tests/reference/venv.py), never imported
by revisit: ``python task_client.py URL PHASE [ARGS...]``; prints one JSON
object with what it saw.

- ``save ORIGIN...``: create a task type, read the load task types as the
  frontend does, then one
  one-shot ``load-git`` task of high priority per origin, as it creates them;
- ``follow TASK_ID...``: the tasks and their runs, as the frontend follows them;
- ``refused ORIGIN``: tasks revisit refuses, and why; then one disabled;
- ``forge URL PATH``: a one-shot ``list-gitdir-full`` task (add forge now);
- ``grab VISIT_TYPE COUNT POLICY``: the runner's grab_next_visits, then
  visit_scheduler_queue_position_set;
- ``first VISIT_TYPE NAME INSTANCE``: the reference's first-visits runner:
  grab_next_visits of one lister's first visits, twice;
- ``lister PATH``: recurring gitdir lister tasks (full every 2 days,
  incremental every hour) as the reference schedules listers, two it refuses,
  then the full one disabled.
"""

from __future__ import annotations

import datetime
import json
import sys

from swh.core.api import RemoteException
from swh.scheduler import get_scheduler
from swh.scheduler.exc import SchedulerException, UnknownPolicy
from swh.scheduler.model import Task, TaskArguments, TaskType
from swh.scheduler.utils import create_oneshot_task, utcnow


def save(scheduler, origins):
    scheduler.create_task_type(
        TaskType(
            type="load-extra",
            description="Extra",
            backend_name="x",
            max_queue_length=7,
            default_interval=datetime.timedelta(days=2),
            backoff_factor=1.5,
        )
    )
    try:
        scheduler.create_task_type(
            TaskType(type="swh-test-ping", description="Ping", backend_name="x")
        )
        other_type = "accepted"
    except SchedulerException as exc:
        other_type = str(exc)
    types = [t.type for t in scheduler.get_task_types()]
    load_types = [t.type for t in scheduler.get_task_types() if t.type.startswith("load")]
    git = scheduler.get_task_type("load-git")
    tasks = scheduler.create_tasks(
        [create_oneshot_task("load-git", url=origin, priority="high") for origin in origins]
    )
    return {
        "load_types": load_types,
        "git_queue_length": git.max_queue_length,
        "missing_type": scheduler.get_task_type("load-nothing") is None,
        "extra": scheduler.get_task_type("load-extra").to_dict(),
        "other_type": other_type,
        "list_types": [t for t in types if t.startswith("list-")],
        "tasks": [
            {
                "id": t.id,
                "status": t.status,
                "priority": t.priority,
                "policy": t.policy,
                "kwargs": t.arguments.kwargs,
            }
            for t in tasks
        ],
    }


def follow(scheduler, ids):
    tasks = scheduler.get_tasks(ids)
    runs = scheduler.get_task_runs(ids)
    return {
        "tasks": {t.id: t.status for t in tasks},
        "runs": {r.task: r.status for r in runs},
        "backend_ids": {r.task: r.backend_id for r in runs},
        "completed": [t.id for t in scheduler.search_tasks(status="completed")],
        "high": [t.id for t in scheduler.search_tasks(task_type="load-git", priority="high")],
    }


def refused(scheduler, origin):
    attempts = {
        "recurring": Task(
            type="load-git",
            arguments=TaskArguments(kwargs={"url": origin}),
            next_run=utcnow(),
            policy="recurring",
        ),
        "unknown_type": create_oneshot_task("load-bzr", url=origin),
        "no_url": create_oneshot_task("load-git", repo=origin),
        "bad_url": create_oneshot_task("load-git", url="not a url"),
        "lister": create_oneshot_task("list-gitdir-incremental"),
        "forge_without_url": create_oneshot_task("list-gitdir-full"),
    }
    seen = {}
    for name, task in attempts.items():
        try:
            # a good task first: a refused batch writes none of it
            scheduler.create_tasks([create_oneshot_task("load-git", url=origin), task])
            seen[name] = "accepted"
        except SchedulerException as exc:
            seen[name] = str(exc)
    seen["remaining"] = len(scheduler.search_tasks())
    (kept,) = scheduler.create_tasks([create_oneshot_task("load-git", url=origin)])
    scheduler.disable_tasks([kept.id])
    seen["disabled"] = [t.status for t in scheduler.get_tasks([kept.id])]
    seen["disabled_runs"] = len(scheduler.get_task_runs([kept.id]))
    try:
        scheduler.grab_ready_tasks("load-git")
        seen["grab_ready"] = "answered"
    except RemoteException as exc:
        seen["grab_ready"] = f"{exc.response.status_code} {exc.args[0]['message']}"
    return seen


def forge(scheduler, url, path):
    """Add forge now as the archive's add-forge-now service asks: a one-shot full
    listing task."""
    (task,) = scheduler.create_tasks(
        [create_oneshot_task("list-gitdir-full", url=url, path=path, priority="high")]
    )
    return {"id": task.id, "status": task.status, "priority": task.priority}


def grab(scheduler, visit_type, count, policy):
    origins = scheduler.grab_next_visits(visit_type, int(count), policy=policy)
    again = scheduler.grab_next_visits(visit_type, int(count), policy=policy)
    scheduler.visit_scheduler_queue_position_set(visit_type, 1_800_000_000)
    try:
        scheduler.grab_next_visits(visit_type, 1, policy="no_such_policy")
        bad = "accepted"
    except UnknownPolicy as exc:
        bad = f"UnknownPolicy: {exc}"
    return {
        "urls": [o.url for o in origins],
        "lister_ids": sorted({str(o.lister_id) for o in origins}),
        "again": [o.url for o in again],
        "position": scheduler.visit_scheduler_queue_position_get().get(visit_type),
        "bad_policy": bad,
    }


def first(scheduler, visit_type, name, instance):
    def grab():
        return scheduler.grab_next_visits(
            visit_type,
            100,
            policy="first_visits_after_listing",
            lister_name=name,
            lister_instance_name=instance,
        )

    origins = grab()
    return {
        "urls": [o.url for o in origins],
        "lister_ids": sorted({str(o.lister_id) for o in origins}),
        "again": [o.url for o in grab()],
    }


def lister(scheduler, path):
    def task(kind, interval, **kwargs):
        return Task(
            type=f"list-gitdir-{kind}",
            arguments=TaskArguments(kwargs={"instance": "local", **kwargs}),
            next_run=utcnow(),
            policy="recurring",
            current_interval=interval,
        )

    full, incremental = scheduler.create_tasks(
        [task("full", datetime.timedelta(days=2), path=path), task("incremental", HOUR)]
    )
    refused = {}
    attempts = {
        "no_interval": task("incremental", None),
        "unknown_lister": Task(
            type="list-nope-full", arguments=TaskArguments(), next_run=utcnow(), policy="recurring"
        ),
        "bad_argument": task("full", HOUR * 48, colour="red"),
    }
    for name, attempt in attempts.items():
        try:
            scheduler.create_tasks([attempt])
            refused[name] = "accepted"
        except SchedulerException as exc:
            refused[name] = str(exc)
    recurring = scheduler.search_tasks(policy="recurring")
    scheduler.disable_tasks([full.id])
    return {
        "created": [
            [t.type, t.policy, t.status, t.current_interval.total_seconds()]
            for t in (full, incremental)
        ],
        "searched": [t.id for t in recurring],
        "oneshot": len(scheduler.search_tasks(policy="oneshot")),
        "refused": refused,
        "disabled": [t.status for t in scheduler.get_tasks([full.id, incremental.id])],
    }


HOUR = datetime.timedelta(hours=1)


def main():
    url, phase, *args = sys.argv[1:]
    scheduler = get_scheduler("remote", url=url)
    if phase == "save":
        result = save(scheduler, args)
    elif phase == "follow":
        result = follow(scheduler, [int(a) for a in args])
    elif phase == "refused":
        result = refused(scheduler, args[0])
    elif phase == "forge":
        result = forge(scheduler, *args)
    elif phase == "grab":
        result = grab(scheduler, *args)
    elif phase == "first":
        result = first(scheduler, *args)
    elif phase == "lister":
        result = lister(scheduler, args[0])
    else:
        raise SystemExit(f"unknown phase {phase}")
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
