"""The field a msgspec validation error names, for messages as ``field: what is wrong``.

msgspec says where a value failed in its text (``Expected `int`, got `str` -
at `$.visit```); the journal and listing decoders name that field in their own
words.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

_MISSING = re.compile(r"Object missing required field `(\w+)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(.*)`")
_AT = re.compile(r"(.*) - at `\$\.(.*)`")
_INDEX = re.compile(r"\[(\d+)\]")


class Fault(NamedTuple):
    """What is wrong, and with which field (dotted path; None: the value as a whole)."""

    kind: Literal["missing", "unknown", "invalid"]
    field: str | None
    text: str


def fault(error: str) -> Fault:
    """The fault msgspec's ValidationError text ``error`` describes."""
    if missing := _MISSING.fullmatch(error):
        return Fault("missing", missing[1], error)
    if unknown := _UNKNOWN.fullmatch(error):
        return Fault("unknown", unknown[1], error)
    if at := _AT.fullmatch(error):
        return Fault("invalid", _INDEX.sub(r".\1", at[2]), at[1])
    return Fault("invalid", None, error)
