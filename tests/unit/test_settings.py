"""One settings class for every process: the environment over the REVISIT_CONFIG
file, and a key or variable that names no setting refused, naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import ConfigFileError, Settings


@pytest.fixture(autouse=True)
def _no_revisit_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in list(os.environ):
        if variable.startswith("REVISIT_"):
            monkeypatch.delenv(variable)


def config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> Path:
    """A settings file holding ``text``, named by REVISIT_CONFIG."""
    config = tmp_path / "revisit.toml"
    config.write_text(text)
    monkeypatch.setenv("REVISIT_CONFIG", str(config))
    return config


def test_lister_settings_come_from_the_file_beneath_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config_file(monkeypatch, tmp_path, 'rpc_port = 5999\nrpc_host = "0.0.0.0"\n')
    monkeypatch.setenv("REVISIT_RPC_HOST", "127.0.0.2")
    settings = Settings()
    assert (settings.rpc_port, settings.rpc_host) == (5999, "127.0.0.2")


def test_a_key_of_the_file_that_names_no_setting_is_refused_naming_it_and_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    text = 'redis_url = "redis://127.0.0.1:6379/0"\nrpc_prot = 5999\n'
    config = config_file(monkeypatch, tmp_path, text)
    with pytest.raises(ConfigFileError) as raised:
        Settings()
    assert str(raised.value) == f"REVISIT_CONFIG: {config}: rpc_prot: no such setting"


def test_a_revisit_variable_that_names_no_setting_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REVISIT_REDIS_ULR", "redis://elsewhere:6379/0")
    with pytest.raises(ConfigFileError) as raised:
        Settings()
    assert str(raised.value) == "REVISIT_REDIS_ULR: no such setting (unset it)"


@pytest.mark.parametrize(
    "variable", ["REVISIT_LOG_LEVEL", "REVISIT_TEST_REDIS_URL", "REVISIT_API_METRICS_PORT"]
)
def test_the_projects_own_variables_that_are_not_settings_are_accepted(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "1")
    assert Settings().rpc_port == 5008


def test_an_argument_that_names_no_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="rpc_prot"):
        Settings(rpc_prot=5999)  # type: ignore[call-arg]


def request_list() -> subprocess.CompletedProcess[str]:
    """``revisit request list`` as a user runs it (this test's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "app", "request", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("where", ["file", "environment"])
def test_the_cli_names_an_unknown_setting_in_one_line(
    where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if where == "file":
        config = config_file(monkeypatch, tmp_path, "journal_topik = 'x'\n")
        expected = f"REVISIT_CONFIG: {config}: journal_topik: no such setting"
    else:
        monkeypatch.setenv("REVISIT_JOURNAL_TOPIK", "x")
        expected = "REVISIT_JOURNAL_TOPIK: no such setting (unset it)"
    done = request_list()
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {expected}"]


def test_a_hoster_takes_its_own_limit_else_the_star_one_else_none() -> None:
    from app.domain.hosts import hoster_limit

    limits = Settings(hoster_limits={"gitlab.example": 4, "*": 8}).hoster_limits
    assert hoster_limit("gitlab.example", limits) == 4
    assert hoster_limit("elsewhere.example", limits) == 8
    assert hoster_limit("elsewhere.example", {"gitlab.example": 4}) is None


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "REVISIT_DATABASE_URL",
            "postgresql://revisit:S3cret@[db",
            "error: REVISIT_DATABASE_URL: not a libpq connection string "
            "(postgresql://user@host:port/db): end of string reached when looking for matching "
            '"..." in IPv6 host address in URI: "..."',
        ),
        (
            "REVISIT_BROKER_REDIS_URL",
            "localhost:6379",
            "error: settings: broker_redis_url: Value error, not a Redis URL: expected "
            "redis://host:port/db (or rediss://, unix://) (REVISIT_BROKER_REDIS_URL, or the "
            "REVISIT_CONFIG file)",
        ),
    ],
)
def test_an_unparsable_service_address_is_one_line_without_the_password(
    variable: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    done = request_list()
    assert done.returncode == 3, done.stderr
    assert done.stderr.replace("\n", " ").strip() == expected
    assert "S3cret" not in done.stderr
