"""The stored form of a visit history (origin_visit_stats.visit_history).

msgpack, because a journal batch decodes and encodes thousands of these:
``[1, base, recent]`` where ``base`` is a Tally as a list in field order (a
history stored before a field was added decodes with its default; zero floats
are stored as 0) and
each recent visit is ``[visit, date, status, snapshot, duration_s]``. Dates
are msgpack Timestamps (UTC).
"""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter
from typing import Any

import msgpack

from app.domain.visit_history import FinalVisit, Tally, VisitHistory

FORMAT_VERSION = 1
_TALLY_FIELDS = [f.name for f in fields(Tally)]
#: A Tally's fields as a tuple, in field order (one C call: a journal batch
#: encodes thousands of histories, and attribute reads by name dominated).
_tally_values = attrgetter(*_TALLY_FIELDS)
#: Positions of the Tally fields that may hold a float (the others are ints,
#: strings, bytes, dates or None, never a float).
_FLOAT_AT = [i for i, f in enumerate(fields(Tally)) if "float" in str(f.type)]


def encode_history(history: VisitHistory) -> bytes:
    """The bytes stored for ``history``."""
    base = history.base
    recent = [(v.visit, v.date, v.status, v.snapshot, v.duration_s) for v in history.recent]
    # A float that is zero is stored as the integer 0: one byte instead of nine
    # (equal on decoding).
    values = list(_tally_values(base))
    for i in _FLOAT_AT:
        if values[i] == 0.0:
            values[i] = 0
    packed: bytes = msgpack.packb(
        [FORMAT_VERSION, values, recent],
        use_bin_type=True,
        datetime=True,
    )
    return packed


def decode_history(data: bytes) -> VisitHistory:
    """The history stored as ``data``."""
    version, base, recent = msgpack.unpackb(data, raw=False, timestamp=3)
    if version != FORMAT_VERSION:
        raise ValueError(f"visit_history: unknown format version {version!r}")
    return VisitHistory(Tally(*base), tuple(_visit(v) for v in recent))


def _visit(fields: list[Any]) -> FinalVisit:
    return FinalVisit(*fields)
