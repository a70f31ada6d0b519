"""``revisit rpc``: an HTTP server speaking the reference scheduler's RPC protocol.

Listers written for the reference (``swh.scheduler.get_scheduler("remote",
url=...)``) talk to it unchanged: POST ``/<endpoint>`` with a msgpack body of
keyword arguments, a msgpack answer (``app.rpc.codec``). It binds 127.0.0.1
by default (``REVISIT_RPC_HOST``, ``REVISIT_RPC_PORT``): it has no
authentication, like the reference's, so expose it through a proxy that has.

Each request thread borrows one of ``DATABASE_CONNECTIONS`` PostgreSQL
connections (``app.db.connection.Connections``); one that was lost is
replaced at the next request, so the server outlives a PostgreSQL restart
(callers get 503 meanwhile, which the reference's client retries).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

from app.db.connection import Connections
from app.rpc.endpoints import SERVED, UNSERVED, RpcInterface, call, unavailable
from app.services.context import Context
from app.settings import Settings

log = logging.getLogger("revisit.rpc")

MSGPACK = "application/x-msgpack"
MAX_BODY_BYTES = 256 * 1024 * 1024
#: PostgreSQL connections the server keeps, one per concurrent request.
DATABASE_CONNECTIONS = 4


def index_page() -> bytes:
    """What a browser sees at ``/``: the endpoints served and not served."""
    served = "\n".join(f"  POST /{path}" for path in SERVED)
    unserved = "\n".join(f"  /{path}: {why}" for path, why in UNSERVED.items())
    return (
        "revisit: the reference scheduler's RPC protocol (msgpack), lister and task API\n\n"
        f"served:\n{served}\n\nnot served (HTTP 501):\n{unserved}\n"
    ).encode()


def make_server(
    settings: Settings,
    observe: Callable[[str, int, float], None] = lambda endpoint, status, seconds: None,
) -> ThreadingHTTPServer:
    """The RPC server bound to ``REVISIT_RPC_HOST:REVISIT_RPC_PORT`` (port 0: any free);
    ``observe`` is told each request's endpoint, HTTP status and seconds (metrics)."""
    ctx = Context.from_settings(settings)
    pool = Connections(settings, DATABASE_CONNECTIONS)

    def clock() -> datetime:
        return datetime.now(tz=UTC)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the reference's client expects

        def do_GET(self) -> None:
            self._answer(200, index_page(), "text/plain; charset=utf-8")

        def do_POST(self) -> None:
            started = time.perf_counter()
            length = int(self.headers.get("content-length") or 0)
            endpoint = self.path.strip("/")
            label = endpoint if endpoint in SERVED or endpoint in UNSERVED else "unknown"
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                self._answer(413, b"body too large", "text/plain")
                return
            body = self.rfile.read(length)
            content_type = (self.headers.get("content-type") or MSGPACK).split(";")[0].strip()
            if body and content_type != MSGPACK:
                status, answer = 415, f"content-type: only {MSGPACK} is served".encode()
                self._answer(status, answer, "text/plain")
            else:
                status, answer = self._call(body)
                self._answer(status, answer, MSGPACK)
            observe(label, status, time.perf_counter() - started)

        def _call(self, body: bytes) -> tuple[int, bytes]:
            try:
                with pool.borrow() as conn:
                    return call(self.path, body, lambda: RpcInterface(conn, ctx, clock))
            except psycopg.OperationalError as exc:  # could not even connect
                return unavailable(exc)

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug(format, *args)

    server = ThreadingHTTPServer((settings.rpc_host, settings.rpc_port), Handler)
    server.daemon_threads = True
    return server


def serve_until(server: ThreadingHTTPServer, stop: threading.Event) -> None:
    """Serve requests until ``stop`` is set."""
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="revisit-rpc")
    thread.start()
    host, port = server.server_address[:2]
    log.info("RPC server on http://%s:%s/", host, port)
    stop.wait()
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def serving_on_a_free_port(settings: Settings) -> Iterator[str]:
    """The RPC server in this process's threads on a free port of ``rpc_host``, for
    tests and benchmarks: its URL while the block runs."""
    server = make_server(settings.model_copy(update={"rpc_port": 0}))
    stop = threading.Event()
    thread = threading.Thread(target=serve_until, args=(server, stop), daemon=True)
    thread.start()
    try:
        yield f"http://{settings.rpc_host}:{server.server_address[1]}/"
    finally:
        stop.set()
        thread.join(10)
