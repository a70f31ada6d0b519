"""Arguments of the RPC endpoints checked from their annotations: a bad one is
answered 400 naming it, before anything runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.db.connection import DictConnection
from app.rpc.codec import decode, encode
from app.rpc.endpoints import RpcInterface, call
from app.services.context import Context

NOW = datetime(2026, 7, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("endpoint", "arguments", "named"),
    [
        ("task/get", {"task_ids": ["7"]}, "task_ids.0:"),
        ("task/get", {"task_ids": [True]}, "task_ids.0:"),
        ("task/search", {"policy": "sometimes"}, "policy:"),
        ("task/search", {"limit": -1}, "limit:"),
        ("task/search", {"before": "yesterday"}, "before:"),
        ("task/search", {"task_type": 3}, "task_type:"),
        ("task_run/get", {"task_ids": [1], "limit": "ten"}, "limit:"),
        ("task/create", {"tasks": 3}, "tasks:"),
        ("origins/grab_next", {"visit_type": "git", "count": -1, "policy": "x"}, "count:"),
        ("origins/grab_next", {"visit_type": "git", "count": 10_001, "policy": "x"}, "count:"),
        ("visit_scheduler/set", {"visit_type": "git", "position": -3}, "position:"),
        ("scheduler_metrics/get", {"lister_id": "not-a-uuid"}, "lister_id:"),
        ("scheduler_metrics/update", {"timestamp": 5}, "timestamp:"),
        ("listers/get_by_id", {"lister_ids": ["x"]}, "lister_ids.0:"),
        ("lister/get", {"name": ""}, "name:"),
        ("lister/get_or_create", {"name": 3}, "name:"),
        ("visit_stats/get", {"ids": [["https://example.org/a"]]}, "ids.0.1:"),
        ("origins/record", {"listed_origins": [], "update_last_seen": "yes"}, "update_last_seen:"),
        ("lister/update", {"lister": {"name": ""}}, "lister.name:"),
        ("lister/visit_types", {"lister": {"name": "x", "id": "x"}}, "lister.id:"),
        ("task_type/create", {"task_type": {"type": ""}}, "task_type.type:"),
    ],
)
def test_a_bad_argument_is_answered_400_naming_it_and_nothing_runs(
    conn: DictConnection, ctx: Context, endpoint: str, arguments: dict[str, Any], named: str
) -> None:
    status, body = call(endpoint, encode(arguments), lambda: RpcInterface(conn, ctx, lambda: NOW))
    answer = decode(body)
    assert (status, answer["type"]) == (400, "SchedulerException")
    assert answer["message"].startswith(f"{endpoint}: {named}")
    assert conn.execute("select count(*) as n from listers").fetchone() == {"n": 0}


def test_good_arguments_of_the_same_endpoints_are_served(
    conn: DictConnection, ctx: Context
) -> None:
    interface = RpcInterface(conn, ctx, lambda: NOW)
    for endpoint, arguments in [
        ("task/get", {"task_ids": 7}),
        ("task/search", {"task_type": "load-git", "limit": 3, "before": NOW}),
        ("scheduler_metrics/update", {"timestamp": NOW}),
        ("visit_stats/get", {"ids": [("https://example.org/a", "git")]}),
    ]:
        status, body = call(endpoint, encode(arguments), lambda: interface)
        assert (status, decode(body)) == (200, [])
