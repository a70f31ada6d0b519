"""Express -> slow escalation (seed 003), as a Dramatiq middleware.

The express lane's time limit is the longest anyone should wait behind a
visit. A visit that outlasts it is stopped by its loader, and the ``visit``
actor marks its message (``mark_outlasted_express``) instead of publishing a
final status; this middleware then re-sends the same visit, marked, to the
head of the slow lane (the slow lane takes express time-outs first), where it
runs with the slow lane's limit. The actor neither raises nor returns a value
for it, so Dramatiq's Retries and dead letters do not see it.
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
from dramatiq import Middleware

from app.domain.lanes import MAX_TIME_LIMIT_S
from app.domain.queue_names import slow_queue
from monitoring.metrics import EXPRESS_TIMEOUTS
from queues.dramatiq_broker import TUNING_OPTIONS, enqueue_first

log = logging.getLogger("revisit.worker")


#: The option by which the visit actor tells this middleware how long the
#: visit ran before it outlasted the express lane (s); never sent anywhere.
OUTLASTED_EXPRESS_OPTION = "revisit_outlasted_express_s"


def mark_outlasted_express(message: Any, duration_s: float) -> None:
    """Tell the middleware that ``message``'s visit outlasted the express lane."""
    message.options[OUTLASTED_EXPRESS_OPTION] = duration_s


def slow_lane_message(
    express: Any, slow_queue_name: str, default_time_limit_ms: int
) -> dramatiq.Message[Any]:
    """The slow-lane visit of an express visit that ran out of time, marked as such:
    the same order and tuning, with the visit type's time limit."""
    tuning = {k: express.options[k] for k in TUNING_OPTIONS if k in express.options}
    limit_ms = tuning.get("visit_time_limit", default_time_limit_ms)
    return dramatiq.Message(
        queue_name=slow_queue_name,
        actor_name="visit",
        args=(),
        kwargs={**express.kwargs, "lane": "slow"},
        options={**tuning, "time_limit": limit_ms, "timed_out_express": True},
    )


class ExpressEscalation(Middleware):
    """Re-sends to the head of the slow lane each visit that outlasted the express lane."""

    def after_process_message(self, broker: Any, message: Any, **outcome: Any) -> None:
        """Escalate the message if its actor said it outlasted the express lane."""
        duration_s = message.options.pop(OUTLASTED_EXPRESS_OPTION, None)
        if outcome.get("exception") is not None or duration_s is None:
            return
        visit_type = str(message.kwargs["visit_type"])
        queue = slow_queue(visit_type)
        enqueue_first(broker, slow_lane_message(message, queue, int(MAX_TIME_LIMIT_S * 1000)))
        EXPRESS_TIMEOUTS.labels(visit_type).inc()
        log.info(
            "%s outlasted the express lane (%.1fs): re-sent to the slow lane",
            message.kwargs.get("url"),
            duration_s,
        )
