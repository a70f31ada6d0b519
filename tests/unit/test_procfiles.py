"""The Procfile split for several hosts stays the single-host Procfile, cut in two."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def entries(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_the_control_plane_and_worker_procfiles_together_are_the_procfile() -> None:
    control, workers = entries("Procfile.control"), entries("Procfile.workers")

    assert set(control).isdisjoint(workers)
    assert {**control, **workers} == entries("Procfile")


def test_the_worker_procfile_runs_only_workers() -> None:
    commands = entries("Procfile.workers").values()

    assert all(" worker" in command for command in commands)
