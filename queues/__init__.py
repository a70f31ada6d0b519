"""The Redis mirror of the scheduling pools: key layout, Lua scripts, rebuild."""

from functools import cache
from importlib import resources


@cache
def lua(name: str) -> str:
    """The text of the Lua script ``queues/lua/<name>.lua``."""
    return (resources.files("queues") / "lua" / f"{name}.lua").read_text()
