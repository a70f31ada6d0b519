"""The interface of a lister revisit runs itself, and the registry of listers.

A lister is a class registered under the ``revisit.listers`` entry point group
(like the loaders' ``revisit.loaders``); the entry point's name is the
lister's name (``listers.name``). revisit's lister worker creates it with no
argument and iterates ``pages(request)``: after each page is recorded, the
page's ``state`` is saved as the lister instance's ``current_state``, so a run
that dies resumes from its last recorded page (the reference listers' habit).
``check_arguments`` is what ``revisit lister schedule --arg`` is held to before
anything is written: an argument the lister does not take, or a bad value.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any, Protocol

from app.inputs.listing import ListedOriginIn

ENTRY_POINT_GROUP = "revisit.listers"


@dataclass(frozen=True)
class ListerRequest:
    """What one run asks of a lister."""

    #: the lister instance's arguments (``revisit lister schedule --arg``)
    arguments: Mapping[str, Any]
    #: the state saved by its previous page (empty at first)
    state: Mapping[str, Any]
    #: a full listing (every origin) or an incremental one (what changed)
    full: bool
    now: datetime


@dataclass(frozen=True)
class ListedPage:
    """Origins found, and the state to save once they are recorded."""

    origins: list[ListedOriginIn]
    state: dict[str, Any] = field(default_factory=dict)


class Lister(Protocol):
    """Lists the origins of one kind of forge; raises on failure (the run then
    backs off). Bad arguments raise ValueError naming the argument."""

    def check_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Raise ValueError naming the first argument it does not take or whose
        value is bad (``pages`` holds its arguments to the same rules)."""
        ...

    def pages(self, request: ListerRequest) -> Iterator[ListedPage]:
        """The origins, page by page."""
        ...


class UnknownListerPlugin(LookupError):
    """No lister is installed under that name."""


def installed_listers() -> list[str]:
    """Names of the installed listers."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def get_lister_plugin(name: str) -> Lister:
    """A new instance of the lister registered under ``name``."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            lister: Lister = ep.load()()
            return lister
    raise UnknownListerPlugin(
        f"no lister named {name!r} (installed: {', '.join(installed_listers()) or 'none'})"
    )


def refuse_unknown_arguments(arguments: Mapping[str, Any], known: Collection[str]) -> None:
    """Raise ValueError naming an argument not in ``known``, listing the known ones."""
    for name in arguments:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{name}: no such argument (known: {', '.join(known)}){hint}")
