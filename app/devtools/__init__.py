"""Development tooling: throwaway services (``embedded``) and the demo (``demo``).

Used by ``revisit demo``, the simulator and the tests; no process of a
deployment imports it (an import contract in pyproject.toml says so).
"""
