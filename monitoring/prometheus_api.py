"""A few calls of Prometheus's HTTP API, for the observability test and the
dashboard picture (standard library only)."""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from typing import Any

from monitoring.dashboard import RATE


class PrometheusError(RuntimeError):
    """Prometheus refused a query (the message is its own)."""


def api(base_url: str, path: str, **params: str | float) -> Any:
    """GET ``/api/v1/<path>`` and return its ``data``; raise on an error status."""
    query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
    url = f"{base_url}/api/v1/{path}" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        body = json.load(exc)
    if body.get("status") != "success":
        raise PrometheusError(f"{body.get('errorType')}: {body.get('error')} in {params}")
    return body["data"]


def with_rate_window(expr: str, window: str) -> str:
    """A dashboard query with Grafana's rate interval variable replaced by ``window``."""
    return expr.replace(RATE, window)


def query_range(
    base_url: str, expr: str, start: float, end: float, step_s: float
) -> list[dict[str, Any]]:
    """The matrix a range query returns: series with ``metric`` labels and ``values``."""
    data = api(base_url, "query_range", query=expr, start=start, end=end, step=step_s)
    return list(data["result"])


def finite_points(series: list[dict[str, Any]]) -> int:
    """How many samples of a range result are numbers (not NaN or infinite)."""
    return sum(1 for s in series for _, v in s["values"] if math.isfinite(float(v)))
