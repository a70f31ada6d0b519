"""The foundation's proof: real PostgreSQL, Redis, tansu and Dramatiq worker processes."""

from pathlib import Path

from app.db.connection import DictConnection
from app.devtools.demo import commit, make_repo
from app.services.context import Context
from app.settings import Settings
from tests.integration.helpers import list_origins, stats_by_url
from tests.processes import running, wait_for, with_constants

FAST = with_constants({"actors.scheduler.POLL_INTERVAL_S": 0.2}, {"REVISIT_LADDER_UNIT_S": "1"})
PROCESSES = {
    "scheduler": ["revisit", "scheduler"],
    "worker": ["revisit", "worker", "--processes", "1", "--threads", "4"],
    "journal": ["revisit", "journal"],
}


def test_listed_repositories_are_visited_and_exactly_the_changed_ones_get_eventful_revisits(
    settings: Settings, conn: DictConnection, ctx: Context, tmp_path: Path
) -> None:
    repos = [tmp_path / "forge" / f"r{i:02d}" for i in range(20)]
    urls = [make_repo(path) for path in repos]
    list_origins(conn, ctx, urls)
    logs = tmp_path / "logs"
    logs.mkdir()
    with running(PROCESSES, FAST, logs):
        wait_for(
            lambda: all(r["last_final_date"] for r in stats_by_url(conn).values()),
            90,
            "a first visit of all 20 repositories",
            logs,
        )
        first = stats_by_url(conn)
        assert all(r["last_visit_status"] == "full" for r in first.values())
        changed = {urls[3], urls[11], urls[17]}
        for url in changed:
            commit(Path(url[len("file://") :]), "new work")

        def changed_revisited() -> bool:
            now = stats_by_url(conn)
            return all(now[u]["eventful_visits"] == 2 for u in changed)

        wait_for(changed_revisited, 90, "eventful revisits of the 3 changed repositories", logs)
    final = stats_by_url(conn)
    eventful_revisits = {u for u, r in final.items() if r["eventful_visits"] > 1}
    assert eventful_revisits == changed
    for url in changed:
        assert final[url]["last_snapshot"] != first[url]["last_snapshot"]
    unchanged = set(urls) - changed
    assert all(final[u]["last_snapshot"] == first[u]["last_snapshot"] for u in unchanged)
    assert sum(r["uneventful_visits"] for r in final.values()) > 0
