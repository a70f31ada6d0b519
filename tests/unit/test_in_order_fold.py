"""A status that arrives in order is folded once onto the fold a history keeps;
that must give exactly what refolding the whole kept history gives."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import structs

from app.db.history_codec import decode_history, encode_history
from app.domain import visit_history
from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_history import (
    FinalVisit,
    Tally,
    VisitHistory,
    fold_in_order,
    merge,
    refold,
    tally_of,
    with_fold,
)
from app.domain.visit_stats import OriginStats, StatsPolicy, StatsUpdate, apply_events, keyed_fudge

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
FUDGE = keyed_fudge()
URL = "https://example.org/r.git"
SNAPSHOT = st.sampled_from([None, b"a" * 20, b"b" * 20, b"c" * 20])
DURATION = st.none() | st.sampled_from([0.0, -0.0, 1.5, 30.0, 600.0])
POLICIES = st.builds(
    StatsPolicy,
    ladder_unit=st.just(DAY),
    min_interval=st.just(timedelta(hours=12)),
    max_interval=st.sampled_from([4 * DAY, 64 * DAY]),
    history_length=st.integers(1, 8),
    spacing=st.sampled_from(["ladder", "age_optimal"]),
    age_multiplier_s2=st.none() | st.just(3e-9),
    visit_cost_reference_s=st.none() | st.just(20.0),
)


def event(
    status: str, visit: int, hours: float, snapshot: bytes | None, duration: float | None
) -> VisitStatusEvent:
    metadata = None if duration is None else {"duration_s": duration}
    return VisitStatusEvent(
        URL, "git", visit, T0 + timedelta(hours=hours), status, snapshot, metadata
    )


@st.composite
def statuses(draw: st.DrawFn) -> list[VisitStatusEvent]:
    """Visits 1..n, each a final status (maybe after a checkpoint) and a created."""
    events = []
    for visit in range(1, draw(st.integers(1, 14)) + 1):
        hours = visit * 24 + draw(st.integers(-20, 20))
        status = draw(st.sampled_from(["full", "partial", "failed", "not_found"]))
        snapshot = draw(SNAPSHOT) if status in ("full", "partial") else None
        events.append(event(status, visit, hours, snapshot, draw(DURATION)))
        events.append(event("created", visit, hours - 1, None, None))
        if draw(st.integers(0, 3)) == 0:
            events.append(event("partial", visit, hours - 0.5, draw(SNAPSHOT), draw(DURATION)))
    return events


@st.composite
def arrivals(draw: st.DrawFn, events: list[VisitStatusEvent]) -> list[list[VisitStatusEvent]]:
    """The statuses in batches: mostly in visit order (as the journal delivers them),
    or shuffled, with some duplicates (replays)."""
    copies = events + draw(st.lists(st.sampled_from(events), max_size=len(events) // 2))
    if draw(st.booleans()):
        ordered = sorted(copies, key=lambda e: (e.visit, e.date))
        swaps = draw(st.lists(st.integers(0, len(ordered) - 2), max_size=3))
        for i in swaps:
            ordered[i], ordered[i + 1] = ordered[i + 1], ordered[i]
    else:
        ordered = draw(st.permutations(copies))
    cuts = sorted(draw(st.lists(st.integers(0, len(ordered)), max_size=10)))
    bounds = [0, *cuts, len(ordered)]
    return [ordered[a:b] for a, b in itertools.pairwise(bounds)]


def without_fold(stats: OriginStats) -> OriginStats:
    """The same stats, their history not keeping its fold: the next batch refolds."""
    history = VisitHistory(stats.history.base, stats.history.recent)
    return structs.replace(stats, history=history)


def stored(stats: OriginStats) -> OriginStats:
    """The stats as the journal reads them back from PostgreSQL (the history's bytes)."""
    return structs.replace(stats, history=decode_history(encode_history(stats.history)))


def signed(tally: Tally) -> list[str]:
    """A tally's values with the sign of a zero, which == does not see (a zero float
    may read back from a stored history as the integer 0, which is the same)."""
    return [
        repr(float(v)) if isinstance(v, int | float) and not isinstance(v, bool) else repr(v)
        for v in structs.astuple(tally)
    ]


def same_update(a: StatsUpdate, b: StatsUpdate) -> bool:
    return (a.stats, a.finals_changed, a.new_outcomes, a.beyond_history) == (
        b.stats,
        b.finals_changed,
        b.new_outcomes,
        b.beyond_history,
    )


@given(st.data(), POLICIES)
def test_folding_in_order_onto_the_kept_fold_equals_refolding_the_history(
    data: st.DataObject, policy: StatsPolicy
) -> None:
    events = data.draw(statuses())
    kept = refolded = OriginStats(URL, "git")
    position = T0
    for batch in data.draw(arrivals(events)):
        position += timedelta(hours=data.draw(st.integers(0, 30)))
        fast = apply_events(stored(kept), batch, position, policy, FUDGE)
        full = apply_events(without_fold(stored(refolded)), batch, position, policy, FUDGE)
        assert same_update(fast, full)
        assert signed(fast.stats.tally) == signed(full.stats.tally)
        kept, refolded = fast.stats, full.stats
        folded = kept.history.folded
        if kept.tally.last_visit_number is not None:
            assert folded is not None and folded.top_index == policy.top_index
            assert folded.tally == tally_of(kept.history, policy.top_index)[0]
            assert folded.tally == kept.tally


@given(st.data(), POLICIES)
def test_the_kept_fold_of_another_ladder_top_is_not_used(
    data: st.DataObject, policy: StatsPolicy
) -> None:
    """A visit type whose max_interval changed refolds its histories once."""
    events = sorted(data.draw(statuses()), key=lambda e: (e.visit, e.date))
    half = len(events) // 2
    other = replace(policy, max_interval=policy.max_interval * 4)
    stats = apply_events(OriginStats(URL, "git"), events[:half], T0, other, FUDGE).stats
    fast = apply_events(stored(stats), events[half:], T0, policy, FUDGE)
    full = apply_events(without_fold(stats), events[half:], T0, policy, FUDGE)
    assert same_update(fast, full)


@given(st.data())
def test_fold_in_order_equals_merge_then_refold_or_declines(data: st.DataObject) -> None:
    events = data.draw(statuses())
    finals = [FinalVisit.from_event(e) for e in events if e.is_final]
    cut = data.draw(st.integers(0, len(finals)))
    top = 5
    history, _ = merge(VisitHistory(), finals[:cut])
    history = with_fold(history, tally_of(history, top)[0], top)
    later = data.draw(st.permutations(finals[cut:]))
    result = fold_in_order(history, later, top)
    merged, beyond = merge(history, later)
    if result is None:
        newest = history.newest_visit()
        assert not later or any(newest is not None and v.visit <= newest for v in later)
        return
    before, after, in_order, outcomes = result
    expected_before, expected_after, expected_outcomes = refold(history, merged, top)
    assert beyond == 0
    assert in_order == merged
    assert (before, after) == (expected_before, expected_after)
    assert outcomes == expected_outcomes[len(history.recent) :]
    assert in_order.folded is not None and in_order.folded.tally == after


def test_a_status_in_order_folds_once_where_a_late_one_refolds_the_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = StatsPolicy(ladder_unit=DAY, min_interval=DAY, max_interval=64 * DAY)
    stats = OriginStats(URL, "git")
    for visit in (1, 2, 3, 4, 5, 6, 7, 8, 10):
        late = event("full", visit, visit * 24, bytes([visit]) * 20, 5.0)
        stats = stored(apply_events(stats, [late], T0, policy, FUDGE).stats)
    assert len(stats.history.recent) == policy.history_length
    folds = []
    counted = visit_history.fold

    def counting(*args: Any) -> Tally:
        folds.append(args)
        return counted(*args)

    monkeypatch.setattr(visit_history, "fold", counting)
    in_order = event("full", 11, 11 * 24, b"x" * 20, 5.0)
    apply_events(stats, [in_order], T0, policy, FUDGE)
    # the new visit, then the oldest kept one into the base (8 are kept)
    assert len(folds) == 2
    folds.clear()
    late = event("full", 9, 9 * 24, b"y" * 20, 5.0)
    apply_events(stats, [late], T0, policy, FUDGE)
    assert len(folds) > policy.history_length
