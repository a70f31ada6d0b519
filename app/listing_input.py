"""Parsing listed origins (JSON lines or CSV), with errors that name line and field."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.input_rules import LoaderArguments, OriginUrl
from app.listing_codec import fast_listed


class ListedOriginIn(BaseModel):
    """One origin as a lister reports it (the fields of seed 002's listed_origins)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: OriginUrl
    visit_type: str = Field(min_length=1)
    extra_loader_arguments: LoaderArguments = Field(default_factory=dict)
    last_update: datetime | None = None
    is_fork: bool | None = None
    forked_from_url: OriginUrl | None = None

    @field_validator("last_update")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamp needs a time zone (e.g. 2024-01-31T12:00:00Z)")
        return value


LISTING_FIELDS = tuple(ListedOriginIn.model_fields)


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


class ListedFields(Protocol):
    """What is read of a listed origin once it is checked: a ``ListedOriginIn``,
    or the fast path's ``app.listing_codec.ListedRow``."""

    @property
    def url(self) -> str: ...
    @property
    def visit_type(self) -> str: ...
    @property
    def extra_loader_arguments(self) -> dict[str, Any]: ...
    @property
    def last_update(self) -> datetime | None: ...
    @property
    def is_fork(self) -> bool | None: ...
    @property
    def forked_from_url(self) -> str | None: ...


NumberedRow = tuple[int, ListedFields]


def parse_json_lines(lines: Iterable[str], first_line: int = 1) -> list[NumberedRow]:
    """Parse every non-blank line, keeping its number; raise ListingInputError on bad ones."""
    rows: list[NumberedRow] = []
    errors: list[RowError] = []
    for number, text in enumerate(lines, start=first_line):
        if (fast := fast_listed(text)) is not None:
            rows.append((number, fast))
            continue
        if not text.strip():
            continue
        if not _is_utf8(text):
            errors.append(RowError(number, "(line)", NOT_UTF8))
            continue
        try:
            rows.append((number, ListedOriginIn.model_validate_json(text)))
        except ValidationError as exc:
            errors.extend(_row_errors(number, exc))
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


def _row_errors(number: int, exc: ValidationError) -> list[RowError]:
    return [
        RowError(
            number,
            ".".join(str(p) for p in err["loc"])
            or ("(line)" if "json" in err["type"] else "(row)"),
            "not JSON: " + err["msg"] if err["type"] == "json_invalid" else err["msg"],
        )
        for err in exc.errors()
    ]


def check_visit_types(rows: Sequence[NumberedRow], known: set[str]) -> None:
    """Refuse rows whose visit type is not configured, naming the known ones."""
    errors = [
        RowError(
            line,
            "visit_type",
            f"unknown visit type {row.visit_type!r} (known: {', '.join(sorted(known))})",
        )
        for line, row in rows
        if row.visit_type not in known
    ]
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
            rows.append((number, ListedOriginIn.model_validate(raw)))
        except ValidationError as exc:
            errors.extend(_row_errors(number, exc))
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
