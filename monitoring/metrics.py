"""Every Prometheus metric revisit exports, in one place, each in the tuple of
the process that updates it (``*_OWNED``): a process serves only its own, not
the others' at zero."""

from __future__ import annotations

import logging

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.registry import Collector

log = logging.getLogger("revisit.metrics")

#: The journal client's (and the supervisor's of ``revisit journal --processes N``).
JOURNAL_OWNED: tuple[Collector, ...] = (
    JOURNAL_MESSAGES := Counter(
        "revisit_journal_messages_total",
        "origin_visit_status messages applied, by status and visit type",
        ["status", "visit_type"],
    ),
    JOURNAL_OUTCOMES := Counter(
        "revisit_journal_visit_outcomes_total",
        "Final visits applied, by outcome (eventful, uneventful, failed) and visit type",
        ["outcome", "visit_type"],
    ),
    JOURNAL_DEAD_LETTERS := Counter(
        "revisit_journal_dead_letters_total",
        "Journal messages that could not be applied and went to the dead-letter topic",
        ["reason"],
    ),
    JOURNAL_BATCH_SECONDS := Histogram(
        "revisit_journal_batch_seconds", "Time to apply one journal batch, commit included"
    ),
    JOURNAL_BATCH_MESSAGES := Histogram(
        "revisit_journal_batch_messages",
        "Messages per journal batch (a full batch means the client is behind)",
        buckets=(1, 10, 100, 500, 1000, 2000, 5000, 10000, 20000, 50000),
    ),
    JOURNAL_BEYOND_HISTORY := Counter(
        "revisit_journal_beyond_history_total",
        "Final statuses older than the visit history kept per origin (duplicates of old visits, "
        "or reordered further than the history reaches): not applied",
        ["visit_type"],
    ),
    JOURNAL_DATABASE_RETRIES := Counter(
        "revisit_journal_database_retries_total",
        "Journal batches retried: 'reconnect' after losing PostgreSQL, 'conflict' after a "
        "deadlock or serialization failure",
        ["reason"],
    ),
    JOURNAL_BATCH_RETRIES := Counter(
        "revisit_journal_batch_retries_total",
        "Journal batches retried after a failure, by cause: 'redis', 'kafka' or 'database' "
        "unavailable, 'error' for anything else (logged with its traceback)",
        ["cause"],
    ),
    JOURNAL_KAFKA_ERRORS := Counter(
        "revisit_journal_kafka_errors_total",
        "Errors the journal's Kafka consumer reported, by librdkafka code (e.g. _ALL_BROKERS_DOWN "
        "while it waits for the broker)",
        ["code"],
    ),
    # How ``revisit journal --processes N`` combines its clients' gauges
    # (monitoring/multiprocess.py): the partitions assigned add up; a partition's
    # lag is its owner's, the client that set it last (a revoked partition's
    # series is forgotten with a tombstone).
    JOURNAL_ASSIGNED_PARTITIONS := Gauge(
        "revisit_journal_assigned_partitions",
        "Partitions of the journal topic assigned to the journal's client processes (0: waiting "
        "for the broker or for their consumer group)",
        multiprocess_mode="livesum",
    ),
    JOURNAL_CONSUMER_LAG := Gauge(
        "revisit_journal_consumer_lag",
        "Messages between the journal client's position and the high watermark, per assigned "
        "partition, as of the last batch (only where the broker reports watermarks)",
        ["partition"],
        multiprocess_mode="livemostrecent",
    ),
    JOURNAL_CONSUMERS_REPLACED := Counter(
        "revisit_journal_consumers_replaced_total",
        "Kafka consumers replaced after a minute without an assignment",
    ),
    REQUEST_LATENCY := Histogram(
        "revisit_request_latency_seconds",
        "Time from a one-shot request (save code now) to its completed visit",
        ["kind", "visit_type"],
        buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600),
    ),
)

#: Seed 002's coverage per lister and visit type, by the scheduler_metrics column
#: each exports (``revisit_<column>``, refreshed by monitoring.coverage).
COVERAGE_GAUGES = {
    column: Gauge(f"revisit_{column}", text, ["lister", "visit_type"])
    for column, text in {
        "origins_known": "Origins a lister ever reported",
        "origins_enabled": "Origins enabled by a lister (seen in its latest listing)",
        "origins_never_visited": "Enabled origins never successfully visited",
        "origins_with_pending_changes": "Enabled origins the lister reports a change of after "
        "our last successful visit",
        "origins_active": "Enabled origins whose reported last update falls within the active "
        "window (monitoring.coverage.ACTIVE_WINDOW_S)",
        "origins_never_visited_overdue": "Enabled origins never successfully visited although "
        "first listed longer ago than monitoring.coverage.NEVER_VISITED_THRESHOLD_S",
    }.items()
}

#: The scheduler's, the periodic coverage figures included (monitoring.coverage).
SCHEDULER_OWNED: tuple[Collector, ...] = (
    SCHEDULED_VISITS := Counter(
        "revisit_scheduled_visits_total",
        "Visits sent to workers, by visit type, the policy that picked them ('request' for "
        "one-shot requests) and the lane (worker pool) whose queue they went to",
        ["visit_type", "policy", "lane"],
    ),
    SCHEDULER_BATCH_SIZE := Histogram(
        "revisit_scheduler_batch_size",
        "Visits sent per scheduling step and queue (0: the queue had no free slot worth a batch)",
        ["visit_type", "lane"],
        buckets=(0, 1, 5, 10, 50, 100, 500, 1000, 5000, 10000),
    ),
    SCHEDULER_POP_SECONDS := Histogram(
        "revisit_scheduler_pop_seconds",
        "Time to pick one batch of recurrent visits: policy queries, the atomic pop, the record",
        ["visit_type"],
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    ),
    SCHEDULER_ENQUEUE_SECONDS := Histogram(
        "revisit_scheduler_enqueue_seconds",
        "Time to enqueue one batch of visits into Dramatiq (one pipelined round trip)",
        ["visit_type"],
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
    ),
    QUEUE_DEPTH := Gauge(
        "revisit_queue_depth",
        "Visits held by each Dramatiq visit queue (waiting, running or delayed; not the late "
        "statuses publish_status sends there) at the last step",
        ["visit_type", "queue", "lane"],
    ),
    QUEUE_ESTIMATED_WAIT := Gauge(
        "revisit_queue_estimated_wait_seconds",
        "Estimated time a visit sent now waits before its worker finishes it: queue depth x "
        "mean recent visit duration / worker threads (Little's law; +Inf while none serves it)",
        ["visit_type", "queue", "lane"],
    ),
    SCHEDULE_DRIFT := Gauge(
        "revisit_schedule_drift_seconds",
        "Real time minus the next visit target the scheduler has reached (seed 000's drift; "
        "under age_optimal, the target of the first planned origin still waiting); "
        "growing: the workers fall behind the schedule",
        ["visit_type"],
    ),
    SCHEDULER_FREE_SLOTS := Gauge(
        "revisit_scheduler_free_slots",
        "Free slots of each visit queue at the last step",
        ["visit_type"],
    ),
    SCHEDULER_STEP_FAILURES := Counter(
        "revisit_scheduler_step_failures_total",
        "Scheduling steps of one visit type that failed (the other visit types go on)",
        ["visit_type"],
    ),
    AGE_MULTIPLIER := Gauge(
        "revisit_age_multiplier_seconds2",
        "Lagrange multiplier of the age-optimal allocation (s^2); its square root is the interval "
        "the fastest-changing origins get. Grows when capacity shrinks",
        ["visit_type"],
    ),
    RETURNED_ORIGINS := Counter(
        "revisit_returned_origins_total",
        "Origins returned to their pool: 'cooled' after a cooldown, 'lost' when a visit never "
        "reported, 'unsent' when in flight with no message in the broker",
        ["visit_type", "reason"],
    ),
    MIRROR_REBUILDS := Counter(
        "revisit_mirror_rebuilds_total",
        "Rebuilds of a visit type's mirror the scheduler made because it was missing (Redis lost "
        "it, or its shard count changed); the visit type was not scheduled meanwhile",
        ["visit_type"],
    ),
    MIRROR_REBUILD_SECONDS := Gauge(
        "revisit_mirror_rebuild_seconds",
        "Duration of the scheduler's last rebuild of a missing mirror (0: none since it started)",
        ["visit_type"],
    ),
    MIRROR_ORIGINS := Gauge(
        "revisit_mirror_origins", "Origins in each place of the mirror", ["visit_type", "place"]
    ),
    VISIT_TYPE_PAUSED := Gauge(
        "revisit_visit_type_paused",
        "1 for a visit type the scheduler sends no visits of: created by a listing, it waits "
        "for an operator to enable it (revisit visit-type set NAME --enable)",
        ["visit_type"],
    ),
    REQUESTS_SCHEDULED := Counter(
        "revisit_requests_scheduled_total", "One-shot requests sent to workers", ["visit_type"]
    ),
    QUEUE_WORKERS := Gauge(
        "revisit_queue_worker_threads",
        "Worker threads serving each queue (registered by the worker processes)",
        ["visit_type", "queue", "lane"],
    ),
    ORIGINS_BY_POOL := Gauge(
        "revisit_origins_by_pool",
        "Listed origins per place (scheduling pool, inflight, cooling) and the policy that picks "
        "from that pool, by lister and visit type (refreshed with the coverage)",
        ["lister", "visit_type", "place", "policy"],
    ),
    *COVERAGE_GAUGES.values(),
    FIRST_VISIT_WAIT := Histogram(
        "revisit_first_visit_wait_seconds",
        "Time from an origin's first listing to its first reported visit",
        ["visit_type"],
        buckets=(1, 5, 15, 30, 60, 300, 900, 3600, 4 * 3600, *(d * 86400 for d in (1, 3, 7, 30))),
    ),
    COVERAGE_REFRESH_SECONDS := Histogram(
        "revisit_coverage_refresh_seconds",
        "Time to refresh the scheduler_metrics table and the other periodic figures",
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    ),
)

#: Updated in the Dramatiq processes: the visit workers, the lister worker
#: (served by Dramatiq's exporter; a labelled series appears where it is updated).
WORKER_OWNED: tuple[Collector, ...] = (
    VISITS := Counter(
        "revisit_worker_visits_total",
        "Visits done by workers, by visit type and status",
        ["visit_type", "status"],
    ),
    VISIT_SECONDS := Histogram(
        "revisit_worker_visit_seconds", "Duration of visits", ["visit_type"]
    ),
    VISIT_LANE_SECONDS := Histogram(
        "revisit_worker_lane_visit_seconds",
        "Duration of visit messages as the worker runs them, by visit type and lane "
        "(observed by monitoring.dramatiq_metrics.WorkerMetrics)",
        ["visit_type", "lane"],
        buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
    ),
    EXPRESS_TIMEOUTS := Counter(
        "revisit_worker_express_timeouts_total",
        "Visits that outlasted the express lane and were re-sent to the slow lane",
        ["visit_type"],
    ),
    HOSTER_BUSY := Counter(
        "revisit_worker_hoster_busy_total",
        "Visits put back because their hoster had as many visits running as it may",
        ["visit_type"],
    ),
    VISITS_DROPPED := Counter(
        "revisit_worker_visits_dropped_total",
        "Visits a worker dropped, publishing nothing, lest two visits of an origin overlap: "
        "'late' it waited past its window (the origin is or will be sent again), 'superseded' "
        "its origin was sent again since (in flight or already cooling down), "
        "'origin_busy' another visit of the origin was running, 'claim_lost' another visit "
        "took the origin while its worker was paused, 'outlasted' it ended past its window",
        ["visit_type", "reason"],
    ),
    ORIGIN_BUSY := Counter(
        "revisit_worker_origin_busy_total",
        "Visits put back because another visit of their origin was running (a request's "
        "visit waits for it)",
        ["visit_type"],
    ),
    LISTER_RUNS := Counter(
        "revisit_lister_runs_total",
        "Lister runs finished, by lister and outcome",
        ["lister", "outcome"],
    ),
    LISTER_ORIGINS := Counter(
        "revisit_lister_origins_listed_total", "Origins recorded by lister runs", ["lister"]
    ),
)

#: The RPC server's.
RPC_OWNED: tuple[Collector, ...] = (
    RPC_REQUESTS := Counter(
        "revisit_rpc_requests_total",
        "Requests to the reference-protocol RPC server, by endpoint and HTTP status",
        ["endpoint", "status"],
    ),
    RPC_SECONDS := Histogram(
        "revisit_rpc_request_seconds", "Time to answer one RPC request", ["endpoint"]
    ),
)

#: The lister scheduler's.
LISTER_SCHEDULER_OWNED: tuple[Collector, ...] = (
    LISTER_RUNS_SENT := Counter(
        "revisit_lister_runs_sent_total", "Lister runs sent to the lister queue", ["kind"]
    ),
)


def owned_registry(owned: tuple[Collector, ...]) -> CollectorRegistry:
    """A registry of ``owned`` plus the process, platform and GC figures."""
    registry = CollectorRegistry()
    for collector in (*owned, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


def serve(port: int, address: str = "127.0.0.1", owned: tuple[Collector, ...] = ()) -> None:
    """Expose ``owned`` on ``address:port``/metrics (0: do not serve)."""
    serve_registry(port, address, owned_registry(owned))


def serve_registry(port: int, address: str, registry: CollectorRegistry) -> None:
    """Expose ``registry`` on ``address:port``/metrics (0: do not serve).

    A port already taken is logged, not fatal: metrics are worth less than
    the process that exports them (the CLI checks the port before starting).
    """
    if not port:
        return
    try:
        start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        log.error("cannot serve metrics on %s:%d: %s", address, port, exc)
