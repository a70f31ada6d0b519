"""The recent final visits of one origin, and what they add up to.

Statuses of one origin are published with keys that spread them over several
Kafka partitions, so they arrive in any order, duplicated on replays. The
stats must not depend on that order: they are a left fold, in visit order, of
the set of final visits (at most one final status per visit). To refold when a
late status lands in the middle, each origin keeps its newest
``history_length`` final visits and the fold of everything older (``base``).
A status older than the base is beyond repair; it is reported, not applied.
Visits of one origin are hours apart, and reordering in the journal spans
seconds to minutes, so a handful of visits is ample.

Most statuses arrive in order, newer than every visit kept. A history also
keeps its own fold (``Folded``), so such a status is folded once onto it
(``fold_in_order``) instead of refolding every kept visit from the base: the
same folds, in the same order, from the same tally, so the same result.

``FinalVisit`` and ``Tally`` are frozen msgspec Structs, not frozen dataclasses:
a batch builds several per origin, and a frozen dataclass sets each field with
``object.__setattr__``, many times slower to build. They compare, hash and
print as dataclasses would; ``msgspec.structs`` has ``fields``,
``astuple`` and ``replace`` for them. msgspec reads them from arrays in field
order (``array_like``; a longer array is refused): the stored visit history
(``app.db.history_codec``) decodes straight into them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal

import msgspec

from app.domain import ladder
from app.domain.change_rate import ChangeObservations, observe
from app.domain.journal_event import VisitStatusEvent
from app.domain.visit_status import is_success

Outcome = Literal["eventful", "uneventful", "failed"]

# Which final status of one visit wins when a visit reports several (a loader
# may publish 'partial' checkpoints before its 'full'): the latest date, then
# this rank, then the snapshot bytes, so the choice never depends on arrival.
_RANK = {"partial": 0, "not_found": 1, "failed": 2, "full": 3}


class FinalVisit(
    msgspec.Struct, frozen=True, gc=False, array_like=True, forbid_unknown_fields=True
):
    """The final status of one visit: what the fold needs of it."""

    visit: int
    date: datetime
    status: str
    snapshot: bytes | None
    duration_s: float | None

    @classmethod
    def from_event(cls, event: VisitStatusEvent) -> FinalVisit:
        """The final visit an origin_visit_status event reports."""
        return cls(event.visit, event.date, event.status, event.snapshot, event.duration_s)

    def precedence(self) -> tuple[datetime, int, bytes, float]:
        """Orders two final statuses of the same visit: the greater one is kept."""
        duration = -1.0 if self.duration_s is None else self.duration_s
        return (self.date, _RANK[self.status], self.snapshot or b"", duration)


class Tally(msgspec.Struct, frozen=True, gc=False, array_like=True, forbid_unknown_fields=True):
    """What a sequence of final visits adds up to (seed 000's feedback loop)."""

    next_position_offset: int = ladder.DEFAULT_INDEX
    eventful_visits: int = 0
    uneventful_visits: int = 0
    failed_visits: int = 0
    failures_in_a_row: int = 0
    successive_visits: int = 0
    last_visit_status: str | None = None
    last_visit_number: int | None = None
    last_final_date: datetime | None = None
    last_successful: datetime | None = None
    last_eventful: datetime | None = None
    last_snapshot: bytes | None = None
    last_duration_s: float | None = None
    change_obs_changed: float = 0.0
    """Change observations (``app.domain.change_rate``): intervals that saw a change."""
    change_obs_changed_s: float = 0.0
    """... their total length (s)."""
    change_obs_unchanged: float = 0.0
    """... intervals that saw none."""
    change_obs_unchanged_s: float = 0.0
    """... total length (s) of the intervals that saw none."""

    @property
    def change_observations(self) -> ChangeObservations:
        """What the visits so far say about how often the origin changes."""
        return ChangeObservations(
            self.change_obs_changed,
            self.change_obs_changed_s,
            self.change_obs_unchanged,
            self.change_obs_unchanged_s,
        )


class Folded(msgspec.Struct, frozen=True, gc=False):
    """What a history's visits add up to: ``tally_of`` the history, folded with
    the ladder's ``top_index`` (a fold under another top differs)."""

    top_index: int
    tally: Tally


class VisitHistory(msgspec.Struct, frozen=True, eq=False, gc=False):
    """The fold of old visits (``base``) and the newest final visits, in visit order.

    A frozen msgspec Struct (cheap to build; a journal batch builds several per
    origin). Equality, hash and repr are written out because the fold it keeps
    is no part of them.
    """

    base: Tally = msgspec.field(default_factory=Tally)
    recent: tuple[FinalVisit, ...] = ()
    folded: Folded | None = None
    """``tally_of`` this history when known (a function of base and recent, so
    not part of equality): what a status that arrives in order folds onto."""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__ or not isinstance(other, VisitHistory):
            return NotImplemented
        return (self.base, self.recent) == (other.base, other.recent)

    def __hash__(self) -> int:
        return hash((self.base, self.recent))

    def __repr__(self) -> str:
        return f"VisitHistory(base={self.base!r}, recent={self.recent!r})"

    def newest_visit(self) -> int | None:
        """Number of the newest final visit known."""
        return self.recent[-1].visit if self.recent else self.base.last_visit_number

    def is_beyond(self, visit: int) -> bool:
        """Whether ``visit`` is already folded into ``base`` (too late to place)."""
        folded = self.base.last_visit_number
        return folded is not None and visit <= folded


def outcome(tally: Tally, visit: FinalVisit) -> Outcome:
    """Classify a final visit against the visits before it.

    A success is eventful when its snapshot differs from the last snapshot seen.
    """
    if is_success(visit.status):
        changed = visit.snapshot is not None and visit.snapshot != tally.last_snapshot
        return "eventful" if changed else "uneventful"
    return "failed"


def fold(tally: Tally, visit: FinalVisit, top_index: int) -> Tally:
    """The tally after one more final visit, the next one in visit order."""
    result = outcome(tally, visit)
    successive = tally.successive_visits + 1 if visit.status == tally.last_visit_status else 1
    final_date = visit.date
    if tally.last_final_date is not None and tally.last_final_date > final_date:
        final_date = tally.last_final_date
    duration = tally.last_duration_s if visit.duration_s is None else visit.duration_s
    if result == "failed":
        return msgspec.structs.replace(
            tally,
            failed_visits=tally.failed_visits + 1,
            failures_in_a_row=tally.failures_in_a_row + 1,
            successive_visits=successive,
            last_visit_status=visit.status,
            last_visit_number=visit.visit,
            last_final_date=final_date,
            last_duration_s=duration,
        )
    eventful = result == "eventful"
    step = ladder.EVENTFUL_STEP if eventful else ladder.UNEVENTFUL_STEP
    obs = tally.change_observations
    if tally.last_successful is not None:
        interval_s = (visit.date - tally.last_successful).total_seconds()
        obs = observe(obs, interval_s, eventful)
    return Tally(
        ladder.clamp_index(tally.next_position_offset + step, top_index),
        tally.eventful_visits + eventful,
        tally.uneventful_visits + (not eventful),
        tally.failed_visits,
        0,
        successive,
        visit.status,
        visit.visit,
        final_date,
        visit.date,
        visit.date if eventful else tally.last_eventful,
        tally.last_snapshot if visit.snapshot is None else visit.snapshot,
        duration,
        obs.changed,
        obs.changed_s,
        obs.unchanged,
        obs.unchanged_s,
    )


def tally_of(history: VisitHistory, top_index: int) -> tuple[Tally, list[Outcome]]:
    """Fold the recent visits onto the base; also return each recent visit's outcome."""
    tally = history.base
    outcomes: list[Outcome] = []
    for visit in history.recent:
        outcomes.append(outcome(tally, visit))
        tally = fold(tally, visit, top_index)
    return tally, outcomes


def fold_of(history: VisitHistory, top_index: int) -> Tally:
    """``tally_of(history, top_index)[0]``, from the fold the history keeps when it can."""
    folded = history.folded
    if folded is not None and folded.top_index == top_index:
        return folded.tally
    if not history.recent:
        return history.base
    return tally_of(history, top_index)[0]


def with_fold(history: VisitHistory, tally: Tally, top_index: int) -> VisitHistory:
    """``history`` keeping ``tally``, which must be ``tally_of(history, top_index)[0]``."""
    return VisitHistory(history.base, history.recent, Folded(top_index, tally))


def fold_in_order(
    history: VisitHistory, visits: list[FinalVisit], top_index: int
) -> tuple[Tally, Tally, VisitHistory, list[Outcome]] | None:
    """Fold final visits that are all newer than every visit of ``history`` onto the
    fold it keeps: the tallies before and after, the merged history (keeping the
    new fold) and the outcomes of the new visits, as ``merge`` then ``refold``
    give them. None when some visit is not newer, or the fold is not known under
    ``top_index``: the caller refolds from the base."""
    folded = history.folded
    if not visits or (history.recent and (folded is None or folded.top_index != top_index)):
        return None
    before = fold_of(history, top_index)
    newest = history.newest_visit()
    folded_up_to = history.base.last_visit_number
    if folded_up_to is not None and (newest is None or folded_up_to > newest):
        newest = folded_up_to
    by_number: dict[int, FinalVisit] = {}
    for visit in visits:
        if newest is not None and visit.visit <= newest:
            return None
        known = by_number.get(visit.visit)
        if known is None or visit.precedence() > known.precedence():
            by_number[visit.visit] = visit
    added = [by_number[n] for n in sorted(by_number)]
    tally = before
    outcomes: list[Outcome] = []
    for visit in added:
        outcomes.append(outcome(tally, visit))
        tally = fold(tally, visit, top_index)
    merged = VisitHistory(history.base, history.recent + tuple(added), Folded(top_index, tally))
    return before, tally, merged, outcomes


def refold(
    old: VisitHistory, new: VisitHistory, top_index: int
) -> tuple[Tally, Tally, list[Outcome]]:
    """The tallies of ``old`` and of ``new`` (same base), and the outcomes of ``new``.

    The visits both share at the start are folded once: when statuses arrive
    in order, ``old`` is a prefix of ``new`` and this costs one fold per visit.
    """
    shared = 0
    for a, b in zip(old.recent, new.recent, strict=False):
        if a != b:
            break
        shared += 1
    tally, outcomes = tally_of(VisitHistory(new.base, new.recent[:shared]), top_index)
    before = tally
    for visit in old.recent[shared:]:
        before = fold(before, visit, top_index)
    for visit in new.recent[shared:]:
        outcomes.append(outcome(tally, visit))
        tally = fold(tally, visit, top_index)
    return before, tally, outcomes


def merge(history: VisitHistory, visits: Iterable[FinalVisit]) -> tuple[VisitHistory, int]:
    """Add final visits to the history; return it and how many were beyond it.

    Merging is a set union keyed by visit number (ties resolved by
    ``precedence``), so it is commutative, associative and idempotent.
    """
    by_number = {v.visit: v for v in history.recent}
    beyond = 0
    for visit in visits:
        if history.is_beyond(visit.visit):
            beyond += 1
            continue
        known = by_number.get(visit.visit)
        if known is None or visit.precedence() > known.precedence():
            by_number[visit.visit] = visit
    recent = tuple(by_number[n] for n in sorted(by_number))
    return VisitHistory(history.base, recent), beyond


def compact(history: VisitHistory, length: int, top_index: int) -> VisitHistory:
    """Fold the oldest recent visits into the base until at most ``length`` remain.

    The tally of the history is unchanged: folding is associative that way (and
    the fold it keeps stays valid when it was folded under the same top).
    """
    if len(history.recent) <= length:
        return history
    base = history.base
    recent = history.recent
    while len(recent) > length:
        base = fold(base, recent[0], top_index)
        recent = recent[1:]
    folded = history.folded
    return VisitHistory(
        base, recent, folded if folded is not None and folded.top_index == top_index else None
    )
