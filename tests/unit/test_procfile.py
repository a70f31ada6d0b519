"""Reading the Procfile that ``revisit up`` and ``revisit systemd-units`` run."""

from pathlib import Path

import pytest

from app.cli.procfile import ProcfileError, read_procfile, select


def test_a_procfile_line_gives_its_variables_expanded_and_its_command(tmp_path: Path) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "# comment\n\nweb: PORT=${WEB_PORT:-9401} HOST=${HOST} revisit rpc --flag 'a b'\n"
    )
    [line] = read_procfile(procfile, {"HOST": "h"})
    assert line.name == "web"
    assert line.environment == {"PORT": "9401", "HOST": "h"}
    assert line.argv == ("revisit", "rpc", "--flag", "a b")
    assert read_procfile(procfile, {"WEB_PORT": "1"})[0].environment["PORT"] == "1"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("web revisit rpc\n", ":1: not 'name: command'"),
        ("web: PORT=1\n", ":1: no command"),
        ("a: x\na: y\n", "process named twice: a"),
        ("# nothing\n", "no process"),
    ],
)
def test_a_procfile_that_cannot_be_run_is_refused_naming_the_line(
    tmp_path: Path, text: str, error: str
) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text(text)
    with pytest.raises(ProcfileError, match=error):
        read_procfile(procfile, {})


def test_a_process_the_procfile_lacks_is_refused_naming_those_it_has(tmp_path: Path) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text("a: x\nb: y\n")
    lines = read_procfile(procfile, {})
    assert [p.name for p in select(lines, ["b"])] == ["b"]
    with pytest.raises(ProcfileError, match=r"no process c in the Procfile \(it has a, b\)"):
        select(lines, ["c"])
