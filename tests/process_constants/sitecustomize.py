"""Test-only: set module constants of the processes a test starts.

Timings that no operator tunes are module constants (``POLL_INTERVAL_S``...);
a test that runs the real processes shortens them through
``tests.processes.with_constants``, which puts this directory on PYTHONPATH
and names the constants in REVISIT_TEST_CONSTANTS (``{"module.NAME": value}``).
Python imports this module at start; each named constant is set as soon as
its module has run, before any other module can read it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

_BY_MODULE: dict[str, dict[str, Any]] = defaultdict(dict)
for _name, _value in json.loads(os.environ.get("REVISIT_TEST_CONSTANTS", "{}")).items():
    _module, _, _attribute = _name.rpartition(".")
    _BY_MODULE[_module][_attribute] = _value


class _SetAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in _BY_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            for attribute, value in _BY_MODULE[name].items():
                if not hasattr(module, attribute):
                    raise AttributeError(f"REVISIT_TEST_CONSTANTS: {name} has no {attribute}")
                setattr(module, attribute, value)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _BY_MODULE:
    sys.meta_path.insert(0, _SetAfterImport())
