"""Every Prometheus metric revisit exports, in one place."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

JOURNAL_MESSAGES = Counter(
    "revisit_journal_messages_total",
    "origin_visit_status messages applied, by status and visit type",
    ["status", "visit_type"],
)
JOURNAL_OUTCOMES = Counter(
    "revisit_journal_visit_outcomes_total",
    "Final visits applied, by outcome (eventful, uneventful, failed) and visit type",
    ["outcome", "visit_type"],
)
JOURNAL_DEAD_LETTERS = Counter(
    "revisit_journal_dead_letters_total",
    "Journal messages that could not be applied and went to the dead-letter topic",
    ["reason"],
)
JOURNAL_BATCH_SECONDS = Histogram(
    "revisit_journal_batch_seconds", "Time to apply one journal batch, commit included"
)
JOURNAL_BATCH_MESSAGES = Histogram(
    "revisit_journal_batch_messages",
    "Messages per journal batch (a full batch means the client is behind)",
    buckets=(1, 10, 100, 500, 1000, 2000, 5000, 10000, 20000, 50000),
)
JOURNAL_BEYOND_HISTORY = Counter(
    "revisit_journal_beyond_history_total",
    "Final statuses older than the visit history kept per origin (duplicates of old visits, "
    "or reordered further than the history reaches): not applied",
    ["visit_type"],
)
JOURNAL_DATABASE_RETRIES = Counter(
    "revisit_journal_database_retries_total",
    "Journal batches retried: 'reconnect' after losing PostgreSQL, 'conflict' after a "
    "deadlock or serialization failure",
    ["reason"],
)
JOURNAL_CONSUMER_LAG = Gauge(
    "revisit_journal_consumer_lag",
    "Messages between the journal client's position and the high watermark, per assigned "
    "partition, as of the last batch (only where the broker reports watermarks)",
    ["partition"],
)
SCHEDULED_VISITS = Counter(
    "revisit_scheduled_visits_total",
    "Recurrent visits sent to workers, by visit type and the policy that picked them",
    ["visit_type", "policy"],
)
SCHEDULER_FREE_SLOTS = Gauge(
    "revisit_scheduler_free_slots",
    "Free slots of each visit queue at the last step",
    ["visit_type"],
)
RETURNED_ORIGINS = Counter(
    "revisit_returned_origins_total",
    "Origins returned to their pool: 'cooled' after a cooldown, 'lost' when a visit never reported",
    ["visit_type", "reason"],
)
MIRROR_ORIGINS = Gauge(
    "revisit_mirror_origins", "Origins in each place of the mirror", ["visit_type", "place"]
)
VISITS = Counter(
    "revisit_worker_visits_total",
    "Visits done by workers, by visit type and status",
    ["visit_type", "status"],
)
VISIT_SECONDS = Histogram("revisit_worker_visit_seconds", "Duration of visits", ["visit_type"])


REQUEST_LATENCY = Histogram(
    "revisit_request_latency_seconds",
    "Time from a one-shot request (save code now) to its completed visit",
    ["kind", "visit_type"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600),
)
REQUESTS_SCHEDULED = Counter(
    "revisit_requests_scheduled_total", "One-shot requests sent to workers", ["visit_type"]
)


SCHEDULED_BY_LANE = Counter(
    "revisit_scheduled_visits_by_lane_total",
    "Recurrent visits sent to workers, by visit type, lane and policy",
    ["visit_type", "lane", "policy"],
)
EXPRESS_TIMEOUTS = Counter(
    "revisit_worker_express_timeouts_total",
    "Visits that outlasted the express lane and were re-sent to the slow lane",
    ["visit_type"],
)


HOSTER_BUSY = Counter(
    "revisit_worker_hoster_busy_total",
    "Visits put back because their hoster had as many visits running as it may",
    ["visit_type"],
)
QUEUE_ESTIMATED_WAIT = Gauge(
    "revisit_queue_estimated_wait_seconds",
    "Estimated wait of a new message: backlog x mean recent visit duration / worker threads",
    ["queue"],
)
QUEUE_BACKLOG = Gauge("revisit_queue_backlog", "Messages queued or running", ["queue"])
QUEUE_WORKERS = Gauge("revisit_queue_worker_threads", "Worker threads serving a queue", ["queue"])


def serve(port: int, address: str = "127.0.0.1") -> None:
    """Expose /metrics on ``address:port`` (0: do not serve)."""
    if port:
        start_http_server(port, addr=address)
