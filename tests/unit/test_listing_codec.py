"""The fast listing decoder (msgspec) never disagrees with ListedOriginIn (pydantic)."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.listing_codec import ListedRow, fast_listed
from app.listing_input import ListedOriginIn, ListingInputError, parse_json_lines

ODD = st.none() | st.booleans() | st.integers(-5, 2**70) | st.floats() | st.just([]) | st.just({})
TIMES = st.sampled_from(
    [
        "2026-01-31T12:00:00Z",
        "2026-01-31T12:00:00+05:30",
        "2026-01-31T12:00:00-00:00",
        "2026-01-31T12:00:00.5Z",
        "2026-01-31T12:00:00.123456+01:00",
        "2026-01-31T12:00:00.1234567Z",
        "2026-01-31T12:00:00",
        "2026-01-31 12:00:00Z",
        "2026-02-30T12:00:00Z",
        "2026-01-31T24:00:00Z",
        "2026-01-31T23:59:60Z",
        "2026-01-31t12:00:00z",
        "2026-01-31T12:00Z",
        "2026-01-31",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59+14:00",
        "2026-01-31T12:00:00+24:00",
        "2026-01-31T12:00:00+05:60",
        "2026-01-31T12:00:00+00:99",
    ]
)
URLS = st.sampled_from(
    [
        "https://forge.example/a.git",
        "git://x/y",
        "ftp:/x",
        "no-scheme",
        "https://x/a b",
        "https://x/\x7f",
        "https://x/\u00e9",
        "",
        "https://" + "a" * 2100,
    ]
)
ARGUMENTS = (
    st.just({"int": 1, "float": 1.0, "exp": 1e2, "big": 2**70, "neg": -0.0})
    | st.dictionaries(
        st.text(max_size=4), st.integers() | st.text(max_size=4) | st.none(), max_size=2
    )
    | st.just({"n": 1e308})
    | st.just({"nested": {"list": [1, "two", None, 3.5]}})
    | st.just({"big": "x" * 17_000})
    | st.integers(1, 400).map(lambda depth: {"deep": json.loads("[" * depth + "]" * depth)})
)


def mostly(good: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` four times in five: most lines then reach the fast decoder's checks."""
    return st.integers(0, 4).flatmap(lambda i: good if i else odd)


GOOD_URLS = st.sampled_from(["https://forge.example/a.git", "git://x/y", "svn+ssh://h/r"])
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "url": mostly(GOOD_URLS, URLS | st.text(max_size=6) | ODD),
    "visit_type": mostly(st.sampled_from(["git", "hg"]), st.sampled_from(["", " "]) | ODD),
    "extra_loader_arguments": mostly(ARGUMENTS, ODD),
    "last_update": mostly(TIMES, ODD),
    "is_fork": mostly(st.none() | st.booleans(), st.sampled_from(["true", 1, 0, "no"])),
    "forked_from_url": mostly(GOOD_URLS | st.none(), URLS | ODD),
    "unknown": st.integers(),
}


@st.composite
def lines(draw: st.DrawFn) -> str:
    value = {name: draw(strategy) for name, strategy in FIELDS.items()}
    dropped = draw(st.sets(st.sampled_from(sorted(FIELDS)), max_size=3))
    if draw(st.integers(0, 9)):
        dropped.add("unknown")
    kept = {k: v for k, v in value.items() if k not in dropped}
    return json.dumps(kept, ensure_ascii=draw(st.booleans()))


def same_row(fast: ListedRow, exact: ListedOriginIn) -> bool:
    names = ListedOriginIn.model_fields
    if any(getattr(fast, n) != getattr(exact, n) for n in names):
        return False
    # What is stored: 1 and 1.0 are equal in Python, not in the jsonb written.
    if json.dumps(fast.extra_loader_arguments) != json.dumps(exact.extra_loader_arguments):
        return False
    if fast.last_update is None or exact.last_update is None:
        return fast.last_update is exact.last_update
    return fast.last_update.utcoffset() == exact.last_update.utcoffset()


@settings(max_examples=1000)
@given(lines())
def test_the_fast_decoder_accepts_only_what_pydantic_accepts_as_the_same_row(text: str) -> None:
    fast = fast_listed(text)
    if fast is None:
        return
    exact = ListedOriginIn.model_validate_json(text)
    assert same_row(fast, exact)


@pytest.mark.parametrize(
    "text",
    [
        '{"url": "https://x/a", "visit_type": "git"}',
        '{"url": "https://x/a", "visit_type": "git", "last_update": "2026-01-31T12:00:00.5Z"}',
        '{"visit_type": "hg", "url": "https://x/a", "is_fork": false,'
        ' "forked_from_url": "https://x/b", "extra_loader_arguments": {"branch": "main"}}',
        '{"url": "https://x/a", "visit_type": "git", "url": "https://x/b"}\n',
    ],
)
def test_the_fast_decoder_takes_the_usual_lines_as_pydantic_reads_them(text: str) -> None:
    fast = fast_listed(text)
    assert fast is not None
    assert same_row(fast, ListedOriginIn.model_validate_json(text))


@pytest.mark.parametrize(
    "text",
    [
        '{"url": "https://x/\\u00e9", "visit_type": "git"}',
        '{"url": "https://x/a", "visit_type": "git", "is_fork": "true"}',
        '{"url": "https://x/a", "visit_type": "git", "last_update": 1700000000}',
        '{"url": "https://x/a", "visit_type": "git", "last_update": "2026-01-31T12:00:00"}',
        '{"url": "x", "visit_type": "git"}',
        '{"url": "https://x/a", "visit_type": "git", "last_update": "2026-01-31T12:00:00+05:60"}',
        '{"url": "https://x/a", "visit_type": "git", "extra_loader_arguments": {"a": '
        + "[" * 250
        + "]" * 250
        + "}}",
        '{"url": "https://x/a", "visit_type": "git", "extra_loader_arguments": {"a": '
        + "[" * 5000
        + "]" * 5000
        + "}}",
    ],
)
def test_lines_the_fast_decoder_leaves_to_pydantic_keep_pydantic_s_verdict(text: str) -> None:
    assert fast_listed(text) is None
    try:
        expected: list[Any] = [ListedOriginIn.model_validate_json(text)]
    except ValidationError:
        with pytest.raises(ListingInputError):
            parse_json_lines([text])
        return
    assert [row for _, row in parse_json_lines([text])] == expected


def test_a_bulk_listing_is_read_by_the_fast_decoder_with_its_line_numbers() -> None:
    text = [
        '{"url": "https://x/a", "visit_type": "git"}',
        "",
        '{"url": "https://x/b", "visit_type": "git", "is_fork": "yes"}',
    ]
    rows = parse_json_lines(text, first_line=10)
    assert [n for n, _ in rows] == [10, 12]
    assert isinstance(rows[0][1], ListedRow)
    assert isinstance(rows[1][1], ListedOriginIn) and rows[1][1].is_fork is True
