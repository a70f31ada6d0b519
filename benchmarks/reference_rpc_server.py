"""The reference scheduler's own RPC server, for benchmarks/listers_rpc.py.

Runs under the reference's virtualenv (tests/reference/venv.py; never a
dependency of revisit):

    .revisit/swh-reference/bin/python benchmarks/reference_rpc_server.py --database-url DSN

Creates its own database on the given PostgreSQL server with the reference
schema (as benchmarks/reference_journal.py does), serves the reference's
Flask app with werkzeug's threaded server on a free loopback port, prints
its URL on one line and its database's DSN on the next, and serves until
killed.
"""

from __future__ import annotations

import argparse
import sys

from reference_journal import create_database
from swh.scheduler.api.server import app
from werkzeug.serving import make_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True, help="admin DSN of the server")
    args = parser.parse_args()
    dsn = create_database(args.database_url)
    app.config["scheduler"] = {"cls": "postgresql", "db": dsn}
    server = make_server("127.0.0.1", 0, app, threaded=True)
    print(f"http://127.0.0.1:{server.server_port}/", flush=True)
    print(dsn, flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
