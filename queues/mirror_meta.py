"""The visit-type bookkeeping kept in the mirror's ``meta`` hash (of shard 0):
pick rates behind ETAs and the pick counts of the age-optimal allocation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.domain.placement import POOLS
from queues.mirror_read import MirrorKeys

#: Planned picks whose lateness is kept between two allocation refreshes.
LATENESS_KEPT = 5000


class PickBookkeeping(MirrorKeys):
    """Mixed into ``queues.mirror.Mirror``: what it counts per visit type."""

    def record_pick_rates(self, visit_type: str, rates: dict[str, float]) -> None:
        """Store the recent pick rate (origins/s) of each pool, for ETAs (only while
        the mirror exists: written after Redis lost it, meta would make an empty
        mirror look built, and no scheduler step would rebuild it)."""
        meta = self.keys(visit_type).meta
        mapping: dict[Any, Any] = {f"rate:{p}": r for p, r in rates.items()}
        if mapping and self.client.exists(meta):
            self.client.hset(meta, mapping=mapping)

    def count_picks(self, visit_type: str, picks: Mapping[str, int]) -> None:
        """Add a step's picks per pool to the counts the allocation measures capacity by
        (only while the mirror exists: meta's absence means it must be rebuilt)."""
        meta = self.keys(visit_type).meta
        if not picks or not self.client.exists(meta):
            return
        pipe = self.client.pipeline(transaction=False)
        for pool, count in picks.items():
            pipe.hincrby(meta, f"picks:{pool}", count)
        pipe.execute()

    def take_pick_counts(
        self, visit_type: str, now_s: float
    ) -> tuple[dict[str, int], float | None]:
        """The picks per pool counted since the last call, and when that was
        (None the first time); the counts restart at ``now_s``."""
        meta = self.keys(visit_type).meta
        if not self.client.exists(meta):
            return {}, None
        fields = [f"picks:{pool}" for pool in POOLS]
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(meta, [*fields, "picks_since"])
        pipe.hdel(meta, *fields)
        pipe.hset(meta, "picks_since", repr(now_s))
        pipe.hsetnx(meta, "picks_first", repr(now_s))
        values = pipe.execute()[0]
        counts: dict[str, int] = {pool: int(v or 0) for pool, v in zip(POOLS, values, strict=False)}
        since = values[-1]
        return counts, (float(since) if since is not None else None)

    def picks_first(self, visit_type: str) -> float | None:
        """When the allocation's pick counts first started (None: never)."""
        value = self.client.hget(self.keys(visit_type).meta, "picks_first")
        return float(value) if value is not None else None

    def picks_since(self, visit_type: str) -> float | None:
        """When the allocation's pick counts last restarted (None: never)."""
        value = self.client.hget(self.keys(visit_type).meta, "picks_since")
        return float(value) if value is not None else None

    def pick_rate(self, visit_type: str, pool: str) -> float:
        """The recent pick rate (origins/s) of a pool, 0 if unknown."""
        value = self.client.hget(self.keys(visit_type).meta, f"rate:{pool}")
        return float(value) if value is not None else 0.0

    def record_lateness(self, visit_type: str, lateness_s: Sequence[float]) -> None:
        """Keep how late planned picks were served (the latest ``LATENESS_KEPT``),
        which the allocation corrects μ by (only while the mirror exists)."""
        keys = self.keys(visit_type)
        if not lateness_s or not self.client.exists(keys.meta):
            return
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(keys.lateness, *[repr(float(v)) for v in lateness_s])
        pipe.ltrim(keys.lateness, -LATENESS_KEPT, -1)
        pipe.execute()

    def take_lateness(self, visit_type: str) -> list[float]:
        """The lateness of the planned picks kept since the last call; restarts."""
        key = self.keys(visit_type).lateness
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(key, 0, -1)
        pipe.delete(key)
        return [float(v) for v in pipe.execute()[0]]

    def replan_state(self, visit_type: str) -> tuple[int, float | None]:
        """Where the re-planning sweep of a visit type goes on (the stats id it
        stopped after, 0: not sweeping) and the multiplier of the last sweep."""
        after, multiplier = self.client.hmget(
            self.keys(visit_type).meta, ["replan_after", "replan_multiplier"]
        )
        return int(after or 0), (float(multiplier) if multiplier is not None else None)

    def set_replan_state(self, visit_type: str, after_id: int, multiplier_s2: float) -> None:
        """Record the sweep's progress (only while the mirror exists)."""
        meta = self.keys(visit_type).meta
        if self.client.exists(meta):
            self.client.hset(
                meta, mapping={"replan_after": after_id, "replan_multiplier": repr(multiplier_s2)}
            )
