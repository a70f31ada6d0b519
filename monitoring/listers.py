"""Metrics of the lister processes: the RPC server and the lister runs."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RPC_REQUESTS = Counter(
    "revisit_rpc_requests_total",
    "Requests to the reference-protocol RPC server, by endpoint and HTTP status",
    ["endpoint", "status"],
)
RPC_SECONDS = Histogram(
    "revisit_rpc_request_seconds", "Time to answer one RPC request", ["endpoint"]
)
LISTER_RUNS = Counter(
    "revisit_lister_runs_total",
    "Lister runs finished, by lister and outcome",
    ["lister", "outcome"],
)
LISTER_ORIGINS = Counter(
    "revisit_lister_origins_listed_total", "Origins recorded by lister runs", ["lister"]
)
LISTER_RUNS_SENT = Counter(
    "revisit_lister_runs_sent_total", "Lister runs sent to the lister queue", ["kind"]
)
