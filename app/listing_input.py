"""Parsing listed origins from JSON lines, with errors that name line and field."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class ListedOriginIn(BaseModel):
    """One origin as a lister reports it (the fields of seed 002's listed_origins)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1)
    visit_type: str = Field(min_length=1)
    extra_loader_arguments: dict[str, Any] = Field(default_factory=dict)
    last_update: datetime | None = None
    is_fork: bool | None = None
    forked_from_url: str | None = None

    @field_validator("last_update")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamp needs a time zone (e.g. 2024-01-31T12:00:00Z)")
        return value


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
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            errors.append(RowError(number, "(line)", f"not JSON: {exc.msg}"))
            continue
        try:
            rows.append((number, ListedOriginIn.model_validate(raw)))
        except ValidationError as exc:
            for err in exc.errors():
                field = ".".join(str(p) for p in err["loc"]) or "(row)"
                errors.append(RowError(number, field, err["msg"]))
    if errors:
        raise ListingInputError(errors)
    return rows


def check_visit_types(rows: list[NumberedRow], known: set[str]) -> None:
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
