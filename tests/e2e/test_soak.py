"""A 2-minute soak: the Procfile's processes under random faults heal without a person.

The 30-minute figures are in benchmarks/README.md (``python -m benchmarks.soak``).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e import run_to_the_end

FAULTS = "kill,pause,redis,broker,postgres,poison,bad_api"
KINDS = {
    *(f"kill_{p}" for p in ("scheduler", "journal", "api")),
    *(f"kill_{lane}_worker" for lane in ("express", "slow", "priority")),
    "kill_main_express_worker",
    "pause_express_worker",
    "redis_flushall",
    "redis_restart",
    "broker_restart",
    "postgres_outage",
    "poison",
    "bad_api",
}


def test_two_minutes_of_random_faults_lose_nothing_and_need_no_person(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    run_to_the_end(
        *("-m", "benchmarks.soak", "--origins", "300", "--seconds", "120", "--settle-s", "40"),
        *("--warmup-s", "8", "--fault-every-s", "5", "--faults", FAULTS),
        *("--logs", str(tmp_path / "logs"), "--json", str(report_path)),
        timeout=600,
    )
    report = json.loads(report_path.read_text())
    assert set(report["faults"]) == KINDS, report
    assert all(r["never"] == 0 for r in report["resume_s"].values()), report
    assert report["restarted_by_hand"] == 0
    assert report["mirror_differences"] == 0
    assert report["not_in_exactly_one_place"] == 0
    assert report["not_visited_since_last_fault"] == 0
    assert report["overlapping_visits"] == 0
    assert report["statuses_never_applied"] == 0
    assert report["poison_sent"] > 0
    # The memory-only broker loses, with its restart, what no one had read yet.
    assert report["poison_missing"] == 0
    lost = report["poison_lost_with_a_broker_restart"]
    assert report["poison_dead_lettered"] + lost == report["poison_sent"]
    assert report["visits"] > report["enabled_origins"]
