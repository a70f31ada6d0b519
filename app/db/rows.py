"""Rows by column name on the fast paths that read tuples or write COPY rows.

The journal and the listing import read and write thousands of rows per batch,
so they use tuples rather than dicts; these helpers keep them by name anyway:
a reader looks each column up once per statement, a writer names its columns
once (``STATS_STAGING`` and ``LISTING_STAGING``, checked against the staging
tables and the COPY statements by ``tests/integration/test_staging_columns.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from psycopg import Cursor


def column_index(cursor: Cursor[Any]) -> dict[str, int]:
    """The position of each column of the statement ``cursor`` just ran, by name."""
    if cursor.description is None:
        raise ValueError("the statement returned no rows to read by name")
    return {column.name: i for i, column in enumerate(cursor.description)}


def json_array(values: Sequence[Any]) -> str:
    """``values`` as one JSON text parameter, for ``json_array_elements_text``.

    psycopg dumps a list parameter element by element in Python; msgspec
    encodes the whole list in C. Strings keep every
    character (JSON escapes control characters); dates go as RFC 3339 text,
    which a ``::timestamptz`` cast reads back exactly if they are in UTC (an
    offset with seconds loses them).
    """
    return msgspec.json.encode(values).decode()
