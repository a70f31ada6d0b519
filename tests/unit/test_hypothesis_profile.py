"""The property tests' randomness: fixed under CI, free elsewhere."""

from __future__ import annotations

from hypothesis import settings

from tests.conftest import IN_CI


def test_property_tests_draw_fixed_examples_exactly_when_run_under_ci() -> None:
    assert settings.default.derandomize is IN_CI
