"""Every benchmark script of revisit imports: CI's mypy does not check
benchmarks/, and a script that imported a function from where it no longer
was went unseen until a run of benchmarks/run_all stopped on it. (The
reference_* scripts run as files in the reference's own virtualenv.)"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted(
    p.stem for p in (Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py")
)


@pytest.mark.parametrize(
    "name", [b for b in BENCHMARKS if b != "__init__" and not b.startswith("reference_")]
)
def test_the_benchmark_module_imports(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    assert module.__name__ == f"benchmarks.{name}"
