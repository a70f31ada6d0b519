"""Parsing listed origins (JSON lines or CSV), with errors that name line and field."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

import msgspec

from app.inputs.decode_errors import fault
from app.inputs.rules import check_last_update, check_loader_arguments, check_url, check_visit_type


class ListedOriginIn(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One origin as a lister reports it (the fields of seed 002's listed_origins).

    The one declaration of a listed origin: JSON lines, CSV cells and API
    payloads are decoded into it by msgspec, which checks the types;
    ``__post_init__`` checks the rules shared with visit requests
    (app.inputs.rules), on decoding and when code builds one, so a value
    PostgreSQL would refuse never gets this far. A refused rule raises
    ValueError as ``field: message``.
    """

    url: str
    visit_type: str
    extra_loader_arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    last_update: datetime | None = None
    is_fork: bool | None = None
    forked_from_url: str | None = None
    #: False: the lister reports the origin but asks that it not be visited.
    enabled: bool = True

    def __post_init__(self) -> None:
        # One try for every rule, not a call per rule: this runs per origin of
        # a bulk listing. ``field`` names the rule being checked.
        field = "url"
        try:
            check_url(self.url)
            field = "visit_type"
            check_visit_type(self.visit_type)
            if self.extra_loader_arguments:
                field = "extra_loader_arguments"
                check_loader_arguments(self.extra_loader_arguments)
            if self.last_update is not None and self.last_update.tzinfo is None:
                field = "last_update"
                raise ValueError("timestamp needs a time zone (e.g. 2024-01-31T12:00:00Z)")
            if self.forked_from_url is not None:
                field = "forked_from_url"
                check_url(self.forked_from_url)
        except ValueError as exc:
            raise ValueError(f"{field}: Value error, {exc}") from None


LISTING_FIELDS: tuple[str, ...] = ListedOriginIn.__struct_fields__
#: Lax (``strict=False``, as for CSV cells and API payloads, which are all
#: text or JSON): "true" and 1 are booleans, a number is a Unix time.
_JSON_LINE = msgspec.json.Decoder(ListedOriginIn, strict=False)


def listed_origin(value: Any) -> ListedOriginIn:
    """``value`` (a map of the fields) as a listed origin; ValueError as ``field: message``."""
    if isinstance(value, ListedOriginIn):
        return value
    try:
        return msgspec.convert(value, ListedOriginIn, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(_field_message(str(exc))) from None


@dataclass(frozen=True)
class RowError:
    """A rejected input line."""

    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.message}"


class ListingInputError(ValueError):
    """The input holds rows that cannot be imported; nothing of it was written."""

    def __init__(self, errors: list[RowError]) -> None:
        self.errors = errors
        shown = "; ".join(str(e) for e in errors[:10])
        more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
        super().__init__(f"{len(errors)} bad row(s): {shown}{more}")


NumberedRow = tuple[int, ListedOriginIn]


def parse_json_lines(lines: Iterable[str], first_line: int = 1) -> list[NumberedRow]:
    """Parse every non-blank line, keeping its number; raise ListingInputError on bad ones."""
    rows: list[NumberedRow] = []
    errors: list[RowError] = []
    for number, text in enumerate(lines, start=first_line):
        if not text.isascii() and not _is_utf8(text):
            errors.append(RowError(number, "(line)", NOT_UTF8))
            continue
        try:
            rows.append((number, _JSON_LINE.decode(text)))
        except msgspec.ValidationError as exc:
            errors.append(_row_error(number, str(exc)))
        except msgspec.DecodeError as exc:
            if text.strip():
                errors.append(RowError(number, "(line)", f"not JSON: {exc}"))
        except RecursionError:
            errors.append(RowError(number, "(line)", "not JSON: nested too deeply"))
    if errors:
        raise ListingInputError(errors)
    return rows


#: Why a line read with errors="surrogateescape" is refused.
NOT_UTF8 = "not UTF-8 text (e.g. a Latin-1 byte)"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _field_message(error: str) -> str:
    """``field: message`` of msgspec's validation error text (or of a rule's)."""
    kind, field, text = fault(error)
    if kind == "missing":
        return f"{field}: Field required"
    if kind == "unknown":
        return f"{field}: Extra inputs are not permitted"
    if field is not None:
        return f"{field}: {text}"
    return error if re.match(r"\w+: ", error) else f"(row): {error}"


def _row_error(number: int, error: str) -> RowError:
    field, _, message = _field_message(error).partition(": ")
    return RowError(number, field, message)


def check_last_updates(rows: Sequence[NumberedRow], now: datetime) -> None:
    """Refuse rows whose ``last_update`` is before 1970 or well past ``now`` (the
    listing's clock, simulated or real), naming each."""
    errors: list[RowError] = []
    for line, row in rows:
        if row.last_update is not None:
            try:
                check_last_update(row.last_update, now)
            except ValueError as exc:
                errors.append(RowError(line, "last_update", str(exc)))
    if errors:
        raise ListingInputError(errors)


def check_csv_header(header: list[str], line: int) -> None:
    """Refuse a CSV header naming unknown columns or no url (a data line read as
    a header, say), naming the known ones."""
    unknown = [name for name in header if name not in LISTING_FIELDS]
    if unknown or "url" not in header:
        detail = f"unknown column(s): {', '.join(unknown)}" if unknown else "no url column"
        known = ", ".join(LISTING_FIELDS)
        raise ListingInputError(
            [RowError(line, "(header)", f"{detail} (the first line names the columns: {known})")]
        )


def parse_csv_rows(lines: Iterable[str], first_line: int = 1) -> list[NumberedRow]:
    """Parse CSV lines (the first one a header naming the fields); like parse_json_lines.

    Empty cells are absent values; ``extra_loader_arguments`` holds a JSON object.
    """
    rows: list[NumberedRow] = []
    errors: list[RowError] = []
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        return rows
    check_csv_header(header, first_line)
    for number, cells in enumerate(reader, start=first_line + 1):
        if not any(cells):
            continue
        if len(cells) != len(header):
            errors.append(
                RowError(number, "(line)", f"expected {len(header)} cells, got {len(cells)}")
            )
            continue
        raw: dict[str, object] = {k: v for k, v in zip(header, cells, strict=True) if v != ""}
        if "extra_loader_arguments" in raw:
            try:
                raw["extra_loader_arguments"] = json.loads(str(raw["extra_loader_arguments"]))
            except json.JSONDecodeError as exc:
                errors.append(RowError(number, "extra_loader_arguments", f"not JSON: {exc.msg}"))
                continue
        try:
            rows.append((number, msgspec.convert(raw, ListedOriginIn, strict=False)))
        except msgspec.ValidationError as exc:
            errors.append(_row_error(number, str(exc)))
    if errors:
        raise ListingInputError(errors)
    return rows


def batches(
    lines: Iterable[str], size: int, *, csv_format: bool
) -> Iterator[list[NumberedRow] | ListingInputError]:
    """Parse a listing file batch by batch (``size`` lines each), keeping line numbers.

    A batch with a bad line comes as the ListingInputError that names its bad
    lines, so the caller can report it and go on with the next batch.
    """
    iterator = iter(lines)
    number = 1
    header: list[str] = []
    if csv_format:
        first = next(iterator, None)
        if first is None:
            return
        try:
            check_csv_header(next(csv.reader([first]), []), 1)
        except ListingInputError as exc:
            yield exc
            return
        header = [first]
        number = 2
    while chunk := list(islice(iterator, size)):
        try:
            if csv_format:
                yield parse_csv_rows([*header, *chunk], first_line=number - 1)
            else:
                yield parse_json_lines(chunk, first_line=number)
        except ListingInputError as exc:
            yield exc
        number += len(chunk)
