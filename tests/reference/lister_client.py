"""A lister's life through the reference scheduler's own client (swh-scheduler).

Run with the reference's interpreter (tests/reference/venv.py), never imported
by revisit: ``python lister_client.py URL PHASE [ARGS...]``; prints one JSON
object with what it saw.

- ``lifecycle COUNT BATCH``: create a lister, record COUNT origins in batches
  of BATCH, update its state, try a stale update, page everything back, update
  and read the metrics, send a bad origin, then one of a visit type revisit
  has not heard of;
- ``stats URL...``: origin_visit_stats_get for those git origins;
- ``upsert VISIT_TYPE URL...``: origin_visit_stats_upsert of a failed visit an
  hour ago for each, then a successful one without a status date, then reads
  them back;
- ``record COUNT BATCH``: only record (timed), for benchmarks/listers_rpc.py.
"""

from __future__ import annotations

import datetime
import json
import sys
import time

from swh.core.api import RemoteException
from swh.core.api.classes import stream_results
from swh.scheduler import get_scheduler
from swh.scheduler.exc import SchedulerException, StaleData
from swh.scheduler.model import LastVisitStatus, ListedOrigin, OriginVisitStats

UTC = datetime.UTC


def origins(lister_id, count, start=0):
    base = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    return [
        ListedOrigin(
            lister_id=lister_id,
            url=f"https://forge.example/group-{i // 100}/project-{i}.git",
            visit_type="git",
            last_update=base + datetime.timedelta(minutes=i) if i % 2 else None,
            extra_loader_arguments={"n": i} if i % 3 == 0 else {},
        )
        for i in range(start, start + count)
    ]


def record(scheduler, lister, count, batch):
    started = time.perf_counter()
    recorded = 0
    for start in range(0, count, batch):
        recorded += len(scheduler.record_listed_origins(origins(lister.id, batch, start)))
    return recorded, time.perf_counter() - started


def lifecycle(scheduler, count, batch):
    lister = scheduler.get_or_create_lister(name="reference", instance_name="forge")
    again = scheduler.get_or_create_lister(name="reference", instance_name="forge")
    recorded, _ = record(scheduler, lister, count, batch)
    finished = datetime.datetime.now(tz=UTC)
    saved = scheduler.update_lister(
        lister.evolve(
            current_state={"last_page": count // batch}, last_listing_finished_at=finished
        )
    )
    try:
        scheduler.update_lister(lister.evolve(current_state={"last_page": 0}))
        stale = "accepted"
    except StaleData as exc:
        stale = f"StaleData: {exc}"
    listed = list(stream_results(scheduler.get_listed_origins, lister_id=lister.id, limit=1000))
    updated = scheduler.update_metrics(lister_id=lister.id)
    try:
        scheduler.start_task_run("no-such-run")
        unserved = "answered"
    except RemoteException as exc:
        unserved = f"{exc.response.status_code} {exc.args[0]['message']}"
    bad = ListedOrigin(lister_id=lister.id, url="https://forge.example/x", visit_type="svn export")
    try:
        scheduler.record_listed_origins([bad])
        refused = "accepted"
    except SchedulerException as exc:
        refused = str(exc)
    tarball = ListedOrigin(
        lister_id=lister.id, url="https://forge.example/x.tar.gz", visit_type="tarball-directory"
    )
    new_type = [o.visit_type for o in scheduler.record_listed_origins([tarball])]
    return {
        "lister_id": str(lister.id),
        "same_lister": again == lister,
        "recorded": recorded,
        "state": saved.current_state,
        "finished_round_trip": saved.last_listing_finished_at == finished,
        "stale": stale,
        "listed": len(listed),
        "distinct_listed": len({o.url for o in listed}),
        "first_listed": listed[0].to_dict() if listed else None,
        "visit_types": scheduler.get_visit_types_for_listed_origins(saved),
        "metrics": {
            m.visit_type: [m.origins_known, m.origins_enabled, m.origins_never_visited]
            for m in updated
        },
        "metrics_got": len(scheduler.get_metrics(lister_id=lister.id, visit_type="git")),
        "unserved": unserved,
        "refused": refused,
        "new_visit_type": new_type,
        "listers": [lst.name for lst in scheduler.get_listers()],
    }


def stats(scheduler, urls):
    found = scheduler.origin_visit_stats_get([(url, "git") for url in urls])
    return {
        "stats": [
            {
                "url": s.url,
                "last_visit_status": s.last_visit_status.value if s.last_visit_status else None,
                "last_snapshot": s.last_snapshot.hex() if s.last_snapshot else None,
                "has_next_position": isinstance(s.next_visit_queue_position, int),
            }
            for s in found
        ],
        "positions": scheduler.visit_scheduler_queue_position_get(),
    }


def upsert(scheduler, visit_type, urls):
    hour_ago = datetime.datetime.now(tz=UTC) - datetime.timedelta(hours=1)
    failed = [
        OriginVisitStats(
            url=url,
            visit_type=visit_type,
            last_visit=hour_ago,
            last_visit_status=LastVisitStatus.failed,
        )
        for url in urls
    ]
    scheduler.origin_visit_stats_upsert(failed)
    snapshot = bytes(range(20))
    scheduler.origin_visit_stats_upsert(
        [OriginVisitStats(url=urls[0], visit_type=visit_type, last_snapshot=snapshot)]
    )
    found = scheduler.origin_visit_stats_get([(url, visit_type) for url in urls])
    try:
        bad = OriginVisitStats(url=urls[0], visit_type="svn export", last_visit=hour_ago)
        scheduler.origin_visit_stats_upsert([bad])
        refused = "accepted"
    except SchedulerException as exc:
        refused = str(exc)
    return {
        "stats": {
            s.url: [
                s.last_visit == hour_ago,
                s.last_visit_status.value if s.last_visit_status else None,
                s.last_snapshot.hex() if s.last_snapshot else None,
            ]
            for s in found
        },
        "refused": refused,
    }


def main():
    url, phase, *args = sys.argv[1:]
    scheduler = get_scheduler("remote", url=url)
    if phase == "lifecycle":
        result = lifecycle(scheduler, int(args[0]), int(args[1]))
    elif phase == "stats":
        result = stats(scheduler, args)
    elif phase == "upsert":
        result = upsert(scheduler, args[0], args[1:])
    else:
        lister = scheduler.get_or_create_lister(name="bench", instance_name=args[2])
        recorded, elapsed = record(scheduler, lister, int(args[0]), int(args[1]))
        result = {"recorded": recorded, "elapsed_s": elapsed}
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
