"""The scheduler process: keeps each visit queue fed from the Redis pools."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import dramatiq

from actors.broker import enqueue_many, make_broker, queue_depth
from app.context import Context
from app.db.connection import connect
from app.db.scheduling import VisitTypeConfig, visit_type_configs
from app.queue_names import visit_queue
from app.scheduling import StepResult, free_slots, schedule_step
from app.settings import Settings
from monitoring.metrics import (
    MIRROR_ORIGINS,
    RETURNED_ORIGINS,
    SCHEDULED_VISITS,
    SCHEDULER_FREE_SLOTS,
)

log = logging.getLogger("revisit.scheduler")
CONFIG_REFRESH_S = 30.0


class SchedulerLoop:
    """One iteration (``step``) schedules every visit type once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ctx = Context.from_settings(settings)
        self.broker = make_broker(settings)
        self.conn = connect(settings)
        self._configs: dict[str, VisitTypeConfig] = {}
        self._configs_at = 0.0

    def configs(self) -> dict[str, VisitTypeConfig]:
        """Visit type configuration, re-read from Postgres every 30 s."""
        if time.monotonic() - self._configs_at > CONFIG_REFRESH_S or not self._configs:
            self._configs = visit_type_configs(self.conn)
            self._configs_at = time.monotonic()
        return self._configs

    def step(self, now: datetime) -> list[StepResult]:
        """Schedule every configured visit type once at ``now``."""
        results = []
        configs = self.configs()
        for visit_type in self.settings.visit_types:
            config = configs.get(visit_type)
            if config is None:
                continue
            queue = visit_queue(visit_type)
            depth = queue_depth(self.broker, queue)
            slots = free_slots(
                config.max_queue_length, depth, self.settings.scheduler_min_free_fraction
            )
            result = schedule_step(self.conn, self.ctx, visit_type, slots, now)
            messages: list[dramatiq.Message[Any]] = [
                dramatiq.Message(
                    queue_name=queue,
                    actor_name="visit",
                    args=(),
                    kwargs=order.as_kwargs(),
                    options={},
                )
                for order in result.orders
            ]
            enqueue_many(self.broker, messages)
            self._observe(result)
            results.append(result)
        return results

    def _observe(self, result: StepResult) -> None:
        vt = result.visit_type
        SCHEDULER_FREE_SLOTS.labels(vt).set(result.free_slots)
        SCHEDULED_VISITS.labels(vt).inc(len(result.orders))
        RETURNED_ORIGINS.labels(vt, "cooled").inc(result.cooled)
        RETURNED_ORIGINS.labels(vt, "lost").inc(result.lost)
        for place, size in self.ctx.mirror.sizes(vt).items():
            MIRROR_ORIGINS.labels(vt, place).set(size)
        if result.orders or result.lost or result.rebuilt:
            log.info(
                "%s: scheduled %d (free %d), %d back from cooldown, %d lost visits returned%s",
                vt,
                len(result.orders),
                result.free_slots,
                result.cooled,
                result.lost,
                ", mirror rebuilt" if result.rebuilt else "",
            )

    def run(self, stop: threading.Event) -> None:
        """Step until ``stop`` is set, pausing between steps."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.step(datetime.now(tz=UTC))
            except Exception:
                log.exception("scheduler step failed; retrying")
            elapsed = time.monotonic() - started
            stop.wait(max(0.0, self.settings.scheduler_poll_interval_s - elapsed))
