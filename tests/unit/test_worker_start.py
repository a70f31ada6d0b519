import os
import socket
import subprocess
import sys
import time


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_worker_started_while_postgresql_is_away_waits_for_it_instead_of_exiting() -> None:
    env = {
        **os.environ,
        "REVISIT_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{closed_port()}/revisit",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "worker"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(4)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        _, stderr = proc.communicate(timeout=10)
    assert "waiting for PostgreSQL (REVISIT_DATABASE_URL)" in stderr
