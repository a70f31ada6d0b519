"""The services the archive's loader configuration names are resolved once, by the
fork server before it forks, not by each visit's child."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from app.loaders import archive, outbound
from app.loaders.outbound import hold_connections_to_rules
from tests.conftest import IN_CI


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch, guarded: None) -> list[str]:
    """The host names resolved in this process (each to 192.0.2.7, no DNS asked)."""
    names: list[str] = []

    def resolve(host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        names.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.7", port or 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return names


def test_the_fork_server_resolves_the_configured_services_once_for_every_visit(
    asked: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import swh.storage  # noqa: F401
    except ImportError as exc:
        if IN_CI:
            raise
        pytest.skip(f"the archive's packages are not installed: {exc}")
    config = {"storage": {"cls": "remote", "url": "http://storage.example:5002/"}}
    (tmp_path / "loader.yml").write_text(json.dumps(config))
    monkeypatch.setenv(archive.CONFIG_VARIABLE, str(tmp_path / "loader.yml"))
    archive._preload()  # the fork server, before it forks
    assert asked == ["storage.example"]
    for _ in range(3):  # three visits' children
        hold_connections_to_rules("http://192.0.2.1/x.git", config)  # a literal: no DNS
    assert asked == ["storage.example"]


def test_refused_connections_ask_the_resolver_again_at_most_every_few_seconds(
    asked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"storage": {"cls": "remote", "url": "http://storage.example:5002/"}}
    clock = [1000.0]
    monkeypatch.setattr(outbound.time, "monotonic", lambda: clock[0])
    check = hold_connections_to_rules("http://192.0.2.1/x.git", config)
    before = asked.count("storage.example")
    for _ in range(3):
        with pytest.raises(ValueError, match="loopback address"):
            check("127.0.0.9")
    assert asked.count("storage.example") == before + 1  # the first refusal asked, not the others
    clock[0] += outbound.RESOLVE_AGAIN_S
    with pytest.raises(ValueError, match="loopback address"):
        check("127.0.0.9")
    assert asked.count("storage.example") == before + 2
