from app.domain.queue_names import lane_queue
from app.services.status import LaneStatus, VisitTypeStatus, rates
from queues.dramatiq_queues import QueueDepth


def status(outcomes: dict[str, int]) -> VisitTypeStatus:
    lane = LaneStatus(QueueDepth(0, 0, 0, 1), 4)
    return VisitTypeStatus("git", {}, {lane_queue("git", "express"): lane}, outcomes, {}, None)


def test_rates_are_visits_ended_between_two_snapshots_and_their_failed_share() -> None:
    before = status({"full": 10, "failed": 2})
    after = status({"full": 16, "failed": 4, "not_found": 2})
    rate = rates(before, after, 2.0)
    assert rate is not None
    assert rate.visits_per_s == 5.0
    assert rate.failed_share == 0.4
    assert after.dead == 1


def test_no_rates_without_time_between_snapshots() -> None:
    assert rates(status({}), status({"full": 1}), 0.0) is None
    quiet = rates(status({"full": 1}), status({"full": 1}), 1.0)
    assert quiet is not None and (quiet.visits_per_s, quiet.failed_share) == (0.0, 0.0)
