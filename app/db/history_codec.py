"""The stored form of a visit history (origin_visit_stats.visit_history).

msgpack, because a journal batch decodes and encodes thousands of these:
``[2, base, recent, top_index, tally]`` where ``base`` is a Tally as a list in
field order (a history stored before a field was added decodes with its
default; zero floats are stored as 0), each recent visit is ``[visit, date,
status, snapshot, duration_s]``, and ``top_index`` and ``tally`` are the fold
the history keeps (``visit_history.Folded``; both nil when it is not known).
Dates are msgpack Timestamps (UTC). Version 1, ``[1, base, recent]``, is read
as a history whose fold is not known.

msgspec decodes either version straight into its Tallies and FinalVisits
(``_Stored``, an array whose fold fields are absent in version 1); a value it
refuses, or an unknown version, raises ValueError naming the column.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any

import msgspec
from msgspec.structs import fields

from app.domain.visit_history import FinalVisit, Folded, Tally, VisitHistory

FORMAT_VERSION = 2
_TALLY_FIELDS = [f.name for f in fields(Tally)]
#: A Tally's fields as a tuple, in field order (one C call: a journal batch
#: encodes thousands of histories, and attribute reads by name dominated).
_tally_values = attrgetter(*_TALLY_FIELDS)
#: Positions of the Tally fields that may hold a float (the others are ints,
#: strings, bytes, dates or None, never a float).
_FLOAT_AT = [i for i, f in enumerate(fields(Tally)) if "float" in str(f.type)]


_ENCODER = msgspec.msgpack.Encoder()


def encode_history(history: VisitHistory) -> bytes:
    """The bytes stored for ``history``.

    msgspec writes them (the recent visits as arrays, ``array_like``), the same
    bytes msgpack wrote with ``use_bin_type`` and ``datetime`` (a property test),
    in less time. Its dates must be aware (they are: the
    journal refuses naive ones, PostgreSQL gives aware ones)."""
    folded = history.folded
    top, tally = (None, None) if folded is None else (folded.top_index, _tally_list(folded.tally))
    return _ENCODER.encode((FORMAT_VERSION, _tally_list(history.base), history.recent, top, tally))


def _tally_list(tally: Tally) -> list[Any]:
    # A float that is zero is stored as the integer 0: one byte instead of nine
    # (equal on decoding). Not -0.0, which would read back as +0.0: a tally
    # folded from the base must equal the one kept, to the sign of a zero.
    values = list(_tally_values(tally))
    for i in _FLOAT_AT:
        if values[i] == 0.0 and math.copysign(1.0, values[i]) > 0:
            values[i] = 0
    return values


class _Stored(msgspec.Struct, array_like=True):
    """A stored history: version 2, or version 1 without its fold."""

    version: int
    base: Tally
    recent: tuple[FinalVisit, ...]
    top_index: int | None = None
    tally: Tally | None = None


_STORED = msgspec.msgpack.Decoder(_Stored)


def decode_history(data: bytes) -> VisitHistory:
    """The history stored as ``data``."""
    try:
        stored = _STORED.decode(data)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"visit_history: {exc}") from None
    if stored.version not in (1, FORMAT_VERSION):
        raise ValueError(f"visit_history: unknown format version {stored.version!r}")
    if stored.tally is None:
        return VisitHistory(stored.base, stored.recent)
    if stored.top_index is None:
        raise ValueError("visit_history: a fold without its top index")
    return VisitHistory(stored.base, stored.recent, Folded(stored.top_index, stored.tally))
