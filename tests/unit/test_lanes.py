from app.domain.lanes import assign_lanes, predicted_slow


def test_unknown_duration_is_not_predicted_slow() -> None:
    assert not predicted_slow(None, 60)
    assert predicted_slow(61, 60) and not predicted_slow(60, 60)


def test_predicted_slow_visits_go_to_the_slow_lane_and_fast_ones_shortest_first() -> None:
    visits = [("a", 100.0), ("b", 5.0), ("c", None), ("d", 30.0), ("e", 70.0)]
    express, slow = assign_lanes(visits, lambda v: v[1], express_slots=10, express_limit_s=60)
    assert [v[0] for v in express] == ["c", "b", "d"]
    assert [v[0] for v in slow] == ["a", "e"]


def test_what_the_express_lane_cannot_take_goes_to_the_slow_lane() -> None:
    visits = [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 90.0)]
    express, slow = assign_lanes(visits, lambda v: v[1], express_slots=2, express_limit_s=60)
    assert [v[0] for v in express] == ["a", "b"]
    assert [v[0] for v in slow] == ["d", "c"]


def test_estimated_wait_is_backlog_times_mean_duration_over_workers() -> None:
    from app.domain.latency import estimated_wait_s

    assert estimated_wait_s(10, [2.0, 4.0], 3) == 10 * 3.0 / 3
    assert estimated_wait_s(0, [], 0) == 0.0
    assert estimated_wait_s(5, [1.0], 0) == float("inf")
    assert estimated_wait_s(5, [], 2) is None
    assert estimated_wait_s(5, [0.0, 0.0], 2) == 0.0


def test_worker_pool_serves_allowed_visit_types_minus_denied_ones() -> None:
    from app.settings import Settings

    table = {"svn", "git", "hg"}
    assert Settings().served_visit_types(table) == ["git", "hg", "svn"]
    allowed = Settings(worker_visit_types_allow=["hg", "svn", "cvs"])
    assert allowed.served_visit_types(table) == ["hg", "svn"]
    both = Settings(worker_visit_types_allow=["hg", "svn"], worker_visit_types_deny=["svn"])
    assert both.served_visit_types(table) == ["hg"]
