"""A worker process watches the aborts of its running requests' visits, on
real Redis (``actors.abort``)."""

import threading
import time

import redis

from actors.abort import VisitAborted, abort_watch
from app.settings import Settings
from queues.keys import aborted_requests
from queues.workers import abort


def test_a_worker_process_watches_the_aborts_of_its_request_visits_from_one_thread(
    settings: Settings,
) -> None:
    client = redis.Redis.from_url(settings.broker_redis_dsn())
    namespace = settings.redis_namespace
    ended: dict[int, str] = {}

    def visit(request_id: int) -> None:
        try:
            with abort_watch(client, namespace, request_id):
                for _ in range(400):  # short sleeps: an interrupt lands between two
                    time.sleep(0.01)
            ended[request_id] = "finished"
        except VisitAborted:
            ended[request_id] = "aborted"

    threads = threading.active_count()
    visits = [threading.Thread(target=visit, args=(request_id,)) for request_id in (1, 2, 3)]
    for thread in visits:
        thread.start()
    time.sleep(0.2)
    assert threading.active_count() <= threads + len(visits) + 1  # one watching thread at most
    abort(client, namespace, [2])
    for thread in visits:
        thread.join()

    assert ended == {1: "finished", 2: "aborted", 3: "finished"}
    assert client.smembers(aborted_requests(namespace)) == set()  # the abort was taken
