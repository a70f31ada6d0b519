"""A held process and the programs it starts reach no address its rule refuses,
from Python, from C or by a program: the seccomp filter and its supervisor
(``app.loaders.below``). Each case runs in a process of its own (``held``); the
rule refuses 127.0.0.2, which stands for the inside of the network and counts
the connections it accepts. No packet goes anywhere but loopback."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.loaders.below import nameservers
from tests.conftest import IN_CI

REFUSED = "127.0.0.2 is inside"

#: Run in the held process: ``held`` (started), ``inside`` and ``outside`` ports,
#: ``result`` (a dict printed as JSON at the end), ``attempt`` (an OSError's errno, or 0).
PRELUDE = """
import errno, json, os, socket, subprocess, sys
from app.loaders.below import Held

inside, outside = int(sys.argv[1]), int(sys.argv[2])
let_through = [tuple(pair) for pair in json.loads(sys.argv[3])]
refuse = set(json.loads(sys.argv[4]))

def check(host, port):
    if None in refuse:
        raise TypeError("a broken rule")
    if host in refuse:
        raise ValueError(f"{host} is inside ({port})")

held = Held(check)
result = {"started": held.start(let_through)}

def attempt(call):
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0
"""

EPILOGUE = """
result["refused"] = held.refused()
print(json.dumps(result))
"""


@pytest.fixture(autouse=True)
def _supported() -> None:
    if platform.machine() not in ("x86_64", "aarch64"):
        message = f"no filter for {platform.machine()}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


class Counting:
    """A TCP server counting the connections it accepts, a UDP socket the datagrams."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server((host, 0))
        self.port = int(self.server.getsockname()[1])
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((host, self.port))
        self.udp.settimeout(0.2)
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def datagrams(self) -> int:
        count = 0
        while True:
            try:
                self.udp.recv(64)
            except OSError:
                return count
            count += 1

    def close(self) -> None:
        self.server.close()
        self.udp.close()


@pytest.fixture
def inside() -> Iterator[Counting]:
    server = Counting("127.0.0.2")
    yield server
    server.close()


@pytest.fixture
def outside() -> Iterator[Counting]:
    server = Counting("127.0.0.1")
    yield server
    server.close()


def run_script(
    code: str,
    inside: Counting,
    outside: Counting,
    let_through: tuple[tuple[str, int], ...] = (),
    refuse: tuple[str | None, ...] = ("127.0.0.2",),
) -> subprocess.CompletedProcess[str]:
    """``code`` (the prelude's arguments given) run to its end."""
    argv = [sys.executable, "-P", "-c", code, str(inside.port), str(outside.port)]
    argv += [json.dumps(let_through), json.dumps(refuse)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def run_held(
    body: str,
    inside: Counting,
    outside: Counting,
    let_through: tuple[tuple[str, int], ...] = (),
    refuse: tuple[str | None, ...] = ("127.0.0.2",),
) -> dict[str, Any]:
    """``body`` run in a held process of its own, whose rule refuses the addresses
    ``refuse``: its ``result``."""
    code = PRELUDE + textwrap.dedent(body) + EPILOGUE
    done = run_script(code, inside, outside, let_through, refuse)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert result["started"] is True
    return result


def test_a_held_process_connects_to_no_refused_address_from_python_c_or_a_program(
    inside: Counting, outside: Counting
) -> None:
    result = run_held(
        """
        result["python"] = attempt(lambda: socket.create_connection(("127.0.0.2", inside)))
        mapped = socket.socket(socket.AF_INET6)
        result["mapped"] = attempt(lambda: mapped.connect(("::ffff:127.0.0.2", inside)))
        program = f"import socket; socket.create_connection(('127.0.0.2', {inside}))"
        ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
        result["program"] = ran.returncode, ran.stderr.strip().splitlines()[-1]
        result["outside"] = attempt(lambda: socket.create_connection(("127.0.0.1", outside)))
        """,
        inside,
        outside,
    )
    assert result["python"] == result["mapped"] == 13  # EACCES
    assert result["program"] == [1, "PermissionError: [Errno 13] Permission denied"]
    assert result["outside"] == 0
    assert result["refused"] == [f"{REFUSED} ({inside.port})"] * 3
    assert inside.accepted == 0
    assert outside.accepted == 1


def test_a_held_process_sends_no_datagram_to_a_refused_address(
    inside: Counting, outside: Counting
) -> None:
    result = run_held(
        """
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        result["sendto"] = attempt(lambda: udp.sendto(b"x", ("127.0.0.2", inside)))
        result["sendmsg"] = attempt(lambda: udp.sendmsg([b"x"], [], 0, ("127.0.0.2", inside)))
        result["outside"] = attempt(lambda: udp.sendto(b"x", ("127.0.0.1", outside)))
        """,
        inside,
        outside,
    )
    assert (result["sendto"], result["sendmsg"], result["outside"]) == (13, 13, 0)
    assert len(result["refused"]) == 2
    assert inside.datagrams() == 0
    assert outside.datagrams() == 1


def test_a_pair_let_through_is_reached_unchecked(inside: Counting, outside: Counting) -> None:
    result = run_held(
        """
        result["let_through"] = attempt(lambda: socket.create_connection(("127.0.0.2", inside)))
        """,
        inside,
        outside,
        let_through=(("127.0.0.2", inside.port),),
    )
    assert (result["let_through"], result["refused"]) == (0, [])
    assert inside.accepted == 1


def test_a_held_process_cannot_set_up_io_uring_to_connect_around_the_filter(
    inside: Counting, outside: Counting
) -> None:
    result = run_held(
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        params = ctypes.create_string_buffer(120)
        result["fd"] = libc.syscall(425, 8, params)  # io_uring_setup
        result["errno"] = ctypes.get_errno()
        """,
        inside,
        outside,
    )
    assert (result["fd"], result["errno"]) == (-1, 38)  # ENOSYS


def test_with_its_supervisor_gone_a_held_process_dies_and_its_programs_connect_nowhere(
    inside: Counting, outside: Counting, tmp_path: Path
) -> None:
    # The held process kills its supervisor (its parent) and dies with it; the
    # program it started lives on, held, with no one to answer for it.
    report = tmp_path / "program"
    program = f"""
import os, socket, time
time.sleep(0.5)
try:
    socket.create_connection(("127.0.0.1", {outside.port}))
    result = "connected"
except OSError as exc:
    result = str(exc.errno)
with open({str(report)!r}, "w") as out:
    out.write(result)
"""
    body = f"""
        import signal, time
        subprocess.Popen([sys.executable, "-c", {program!r}], start_new_session=True)
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(5)
        result["survived"] = True
        """
    done = run_script(PRELUDE + textwrap.dedent(body) + EPILOGUE, inside, outside)
    assert done.returncode == -9  # the supervisor, killed
    assert "survived" not in done.stdout
    for _ in range(100):
        if report.exists() and report.read_text():
            break
        time.sleep(0.05)
    assert report.read_text() == "38"  # ENOSYS: the filter fails closed
    assert outside.accepted == 0


def test_the_supervisor_exits_with_its_held_process_exit_code(
    inside: Counting, outside: Counting
) -> None:
    done = run_script(PRELUDE + "sys.stdout.flush()\nos._exit(3)\n", inside, outside)
    assert done.returncode == 3


def test_a_datagram_to_an_unspecified_family_address_is_held_as_ipv4(
    inside: Counting, outside: Counting
) -> None:
    # Linux sends a UDP datagram addressed AF_UNSPEC to its IPv4 address.
    result = run_held(
        """
        import ctypes, struct
        libc = ctypes.CDLL(None, use_errno=True)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        name = struct.pack("=H", 0) + struct.pack(">H", inside) + socket.inet_aton("127.0.0.2")
        name += bytes(8)
        sent = libc.sendto(udp.fileno(), b"x", 1, 0, name, len(name))
        result["sendto"] = sent, ctypes.get_errno()
        """,
        inside,
        outside,
    )
    assert result["sendto"] == [-1, 13]
    assert inside.datagrams() == 0


def test_a_rule_that_fails_refuses_the_connection_naming_why(
    inside: Counting, outside: Counting
) -> None:
    result = run_held(
        """
        result["first"] = attempt(lambda: socket.create_connection(("127.0.0.1", outside)))
        result["second"] = attempt(lambda: socket.create_connection(("127.0.0.1", outside)))
        """,
        inside,
        outside,
        refuse=("127.0.0.1", None),  # None makes the rule raise TypeError
    )
    assert (result["first"], result["second"]) == (13, 13)
    assert len(result["refused"]) == 2
    assert all(r.startswith("connection refused: TypeError") for r in result["refused"])
    assert outside.accepted == 0


def test_the_resolvers_servers_are_read_from_resolv_conf(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "resolv.conf")
    with open(path, "w") as conf:
        conf.write("# comment\nnameserver 127.0.0.53\nsearch example\nnameserver fe80::1%eth0\n")
    assert nameservers(path) == [("127.0.0.53", 53), ("fe80::1", 53)]
    assert nameservers(os.path.join(tmp_path, "missing")) == []
