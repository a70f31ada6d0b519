"""When a worker leaves a visit aside lest it overlap another visit of its origin."""

import threading
import time

import pytest
from dramatiq.middleware import Interrupt

from actors.visiting import claim_ttl_ms
from actors.watch import Watch
from app.domain.cooldown import superseded
from queues import dramatiq_broker

SENT = 1_800_000_000.0


@pytest.mark.parametrize(
    ("in_flight_since", "expected"),
    [
        (None, False),  # not in flight: nothing says it was sent again
        (SENT, False),  # in flight from this very send
        (SENT + 1e-7, False),  # the same send, read back through Postgres's microseconds
        (SENT - 3600, False),  # in flight from an earlier send
        (SENT + 30, True),  # sent again since
    ],
)
def test_a_visit_is_superseded_only_by_a_later_send_of_its_origin(
    in_flight_since: float | None, expected: bool
) -> None:
    assert superseded(in_flight_since, SENT) is expected


def test_a_killed_workers_claim_expires_before_dramatiq_gives_its_message_to_another() -> None:
    assert claim_ttl_ms() < dramatiq_broker.HEARTBEAT_TIMEOUT_MS


class Tripped(Interrupt):
    pass


def test_a_watch_interrupts_only_the_block_that_waits_for_it() -> None:
    trip = threading.Event()
    watch = Watch(trip.is_set, 0.01, Tripped, "test-watch")
    watch.start()
    time.sleep(0.05)  # polled, not tripped: nothing raised outside a block
    trip.set()
    with pytest.raises(Tripped), watch.interrupting():
        for _ in range(500):  # short sleeps: an interrupt lands between two
            time.sleep(0.01)
    assert watch.tripped
    with pytest.raises(Tripped), watch.interrupting():  # tripped already: at once
        pass
    watch.stop(wait=True)
