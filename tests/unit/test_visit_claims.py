"""When a worker leaves a visit aside lest it overlap another visit of its origin."""

import threading
import time

import pytest
from dramatiq.middleware import Interrupt

from actors import watch
from actors.visiting import claim_ttl_ms, renewal_period_s
from actors.watch import Tripwire
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


def test_the_watching_thread_polls_often_enough_to_renew_a_claim_every_renewal_period() -> None:
    assert renewal_period_s() >= watch.POLL_S


class Tripped(Interrupt):
    pass


def test_a_tripwire_interrupts_only_the_block_that_waits_for_it() -> None:
    wire = Tripwire(Tripped)
    wire.trip()  # outside a block: nothing raised
    with pytest.raises(Tripped), wire.interrupting():  # tripped already: at once
        pass
    wire = Tripwire(Tripped)
    with pytest.raises(Tripped), wire.interrupting():
        threading.Timer(0.05, wire.trip).start()
        for _ in range(500):  # short sleeps: an interrupt lands between two
            time.sleep(0.01)
    assert wire.tripped
