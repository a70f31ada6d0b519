"""What the soak checks: the journal as published, and where every origin is."""

from __future__ import annotations

import itertools
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer

from app.db.connection import DictConnection
from app.kafka.client import ensure_topics
from app.kafka.codec import UndecodableMessage, decode
from app.services.context import Context
from app.settings import Settings

POISON_PREFIX = b"\xc1soak-poison-"
FINAL = ("full", "partial", "failed", "not_found")
RESTED = ("failed", "not_found")


class JournalWatch:
    """Reads the journal and dead-letter topics as a group of its own: final statuses
    published, poison dead-lettered, and visits of one origin that overlapped."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.consumer = self._subscribe()
        #: origin -> visit -> [created at, final at] (Unix seconds)
        self.spans: dict[str, dict[int, list[float | None]]] = defaultdict(dict)
        self._finals: set[tuple[str, int]] = set()
        self._poison: set[bytes] = set()

    def _subscribe(self) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self.settings.kafka_brokers,
                "group.id": f"soak-watch-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 2000,
                "log_level": 0,
            }
        )
        consumer.subscribe([self.settings.journal_topic, self.settings.dead_letter_topic])
        return consumer

    def after_broker_restart(self) -> None:
        """Read the new (memory-only) broker's topics from their start, in a new group:
        the old group's consumer may never be given the topics made again. The
        topics are made first, so that the new group is not formed without them."""
        self.consumer.close()
        ensure_topics(self.settings)
        self.consumer = self._subscribe()

    @property
    def finals(self) -> int:
        """Distinct visits whose final status was published."""
        return len(self._finals)

    def saw_poison(self, value: bytes) -> bool:
        """Whether this poison message was found on the dead-letter topic."""
        return value in self._poison

    @property
    def poison_dead_lettered(self) -> int:
        """Distinct poison messages found on the dead-letter topic."""
        return len(self._poison)

    def poll(self, for_s: float = 0.0) -> None:
        """Read what is there (for at least ``for_s`` seconds)."""
        deadline = time.monotonic() + for_s
        while True:
            messages = self.consumer.consume(2000, timeout=0.1)
            for m in messages:
                if m.error() is None:
                    self._read(str(m.topic()), m.value() or b"")
            if not messages and time.monotonic() >= deadline:
                return

    def _read(self, topic: str, value: bytes) -> None:
        if topic == self.settings.dead_letter_topic:
            if value.startswith(POISON_PREFIX):
                self._poison.add(value)
            return
        try:
            status = decode(value)
        except UndecodableMessage:
            return
        if not isinstance(status, dict):
            return
        origin, visit, date = status.get("origin"), status.get("visit"), status.get("date")
        if not isinstance(origin, str) or not isinstance(visit, int):
            return
        at = date.timestamp() if isinstance(date, datetime) else None
        span = self.spans[origin].setdefault(visit, [None, None])
        if status.get("status") == "created":
            span[0] = at
        elif status.get("status") in FINAL:
            span[1] = at
            self._finals.add((origin, visit))

    def overlaps(self) -> list[str]:
        """Visits that started before the previous visit of the same origin ended,
        each as ``origin: visit [created, final] / visit [created, final]``."""
        return [text for _, text in self.overlapping()]

    def overlapping(self) -> list[tuple[float, str]]:
        """``overlaps``, each with when the later visit started (Unix seconds)."""
        found = []
        for origin, visits in self.spans.items():
            spans = sorted(
                (s, e, visit) for visit, (s, e) in visits.items() if s is not None and e is not None
            )
            for (s1, e1, v1), (s2, e2, v2) in itertools.pairwise(spans):
                if s2 < e1:
                    text = f"{origin}: {v1} [{s1:.3f}, {e1:.3f}] / {v2} [{s2:.3f}, {e2:.3f}]"
                    found.append((s2, text))
        return found

    def never_applied(self, applied: dict[str, int | None]) -> list[tuple[float, str]]:
        """Final statuses published whose visit is newer than the last one PostgreSQL
        applied of its origin (``applied``: url -> last_visit_number), each with
        its date (Unix seconds) and as ``origin: visit (applied: visit)``."""
        return [
            (end, f"{origin}: {visit} (applied: {applied.get(origin)})")
            for origin, visits in self.spans.items()
            for visit, (_, end) in visits.items()
            if end is not None and visit > (applied.get(origin) or 0)
        ]

    def close(self) -> None:
        """Leave the group."""
        self.consumer.close()


def places_report(
    conn: DictConnection, ctx: Context, visit_type: str, last_fault_at: float
) -> dict[str, int]:
    """Enabled origins not in exactly one place of the mirror, and enabled origins
    not visited since the last fault, leaving out those the policy rests on
    purpose: their last visit failed or found nothing (it rests them
    ``min_interval``, 12 h by default), or their forge reports no change since
    their last successful visit and their next target is after the fault
    (age_optimal takes such an origin only once due: before, its visit could
    only be useless)."""
    actual, _parked = ctx.mirror.snapshot(visit_type)
    rows = conn.execute(
        "select id, last_visit, last_visit_status::text as status,"
        " (last_update is not null and last_successful is not null"
        "  and last_update <= last_successful) as up_to_date,"
        " next_visit_queue_position as target"
        " from origin_visit_stats"
        " where visit_type = %s and listed and not disabled_for_failures",
        (visit_type,),
    ).fetchall()
    since = datetime.fromtimestamp(last_fault_at, tz=UTC)

    def rested(r: dict[str, Any]) -> bool:
        planned_later = r["up_to_date"] and r["target"] is not None and r["target"] > since
        return r["status"] in RESTED or bool(planned_later)

    return {
        "enabled_origins": len(rows),
        "not_in_exactly_one_place": sum(1 for r in rows if len(actual.get(r["id"], [])) != 1),
        "not_visited_since_last_fault": sum(
            1
            for r in rows
            if not rested(r) and (r["last_visit"] is None or r["last_visit"] < since)
        ),
    }
