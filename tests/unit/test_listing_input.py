from datetime import UTC, datetime, timedelta

import pytest

from app.inputs.listing import (
    ListedOriginIn,
    ListingInputError,
    listed_origin,
    parse_csv_rows,
    parse_json_lines,
)


def test_valid_lines_parse_with_their_line_numbers() -> None:
    rows = parse_json_lines(
        [
            '{"url": "https://a", "visit_type": "git"}',
            "",
            '{"url": "https://b", "visit_type": "hg",'
            ' "last_update": "2026-01-01T00:00:00Z", "is_fork": true}',
        ]
    )
    assert [(n, r.url) for n, r in rows] == [(1, "https://a"), (3, "https://b")]
    assert rows[1][1].is_fork is True


def test_malformed_lines_are_reported_with_line_and_field() -> None:
    with pytest.raises(ListingInputError) as info:
        parse_json_lines(
            [
                '{"url": "https://a", "visit_type": "git"}',
                "{not json",
                '{"url": "", "visit_type": "git"}',
                '{"url": "https://c", "visit_type": "git", "last_update": "2026-01-01T00:00:00"}',
                '{"url": "https://d", "visit_type": "git", "colour": "red"}',
            ]
        )
    found = {(e.line, e.field) for e in info.value.errors}
    assert found == {(2, "(line)"), (3, "url"), (4, "last_update"), (5, "colour")}
    assert "line 2" in str(info.value)


@pytest.mark.parametrize(
    "name", ["git", "tarball-directory", "svn-export", "git-checkout", "pypi", "3d", "a.b_c"]
)
def test_the_references_visit_type_names_are_read(name: str) -> None:
    [(_, row)] = parse_json_lines([f'{{"url": "https://a", "visit_type": "{name}"}}'])
    assert row.visit_type == name


@pytest.mark.parametrize("name", ["", "Git", "-git", "svn export", "a{b}", "a:b", "x" * 65])
def test_a_visit_type_that_cannot_name_a_queue_is_refused_with_the_rule(name: str) -> None:
    with pytest.raises(ListingInputError, match=r"line 1: visit_type: .*lower case letters"):
        parse_json_lines([f'{{"url": "https://a", "visit_type": "{name}"}}'])


def test_the_usual_fields_are_read_with_their_types() -> None:
    [(_, row)] = parse_json_lines(
        [
            '{"visit_type": "hg", "url": "https://x/a", "is_fork": false,'
            ' "forked_from_url": "https://x/b", "extra_loader_arguments": {"branch": "main"},'
            ' "last_update": "2026-01-31T12:00:00.5+05:30"}'
        ]
    )
    assert row == ListedOriginIn(
        url="https://x/a",
        visit_type="hg",
        extra_loader_arguments={"branch": "main"},
        last_update=datetime(2026, 1, 31, 6, 30, 0, 500_000, tzinfo=UTC),
        is_fork=False,
        forked_from_url="https://x/b",
    )
    assert row.last_update is not None and row.last_update.utcoffset() == timedelta(hours=5.5)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"is_fork": "true"', True),
        ('"is_fork": 0', False),
        ('"last_update": 1700000000', datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
        ('"url": "https://x/\\u00e9"', "https://x/\u00e9"),
    ],
)
def test_a_listing_is_read_as_leniently_as_its_text_allows(text: str, value: object) -> None:
    [(_, row)] = parse_json_lines(['{"url": "https://x/a", "visit_type": "git", ' + text + "}"])
    field = text.split('"')[1]
    assert getattr(row, field) == value


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ('"is_fork": "perhaps"', "is_fork", "Expected `bool | null`, got `str`"),
        ('"url": 3', "url", "Expected `str`, got `int`"),
        ('"visit_type": ""', "visit_type", "Value error, '' cannot name a visit type"),
        ('"url": "no-scheme"', "url", "Value error, URL must start with a scheme, e.g. https://"),
        ('"forked_from_url": "x y"', "forked_from_url", "Value error, URL holds a forbidden"),
        ('"extra_loader_arguments": [1]', "extra_loader_arguments", "Expected `object`"),
        ('"extra_loader_arguments": {"a": "\\u0000"}', "extra_loader_arguments", "Value error"),
        ('"last_update": "2026-01-31T24:00:00Z"', "last_update", "Invalid RFC3339"),
    ],
)
def test_a_refused_field_is_named_with_why(text: str, field: str, message: str) -> None:
    with pytest.raises(ListingInputError) as info:
        parse_json_lines(['{"url": "https://x/a", "visit_type": "git", ' + text + "}"], 7)
    [error] = info.value.errors
    assert (error.line, error.field) == (7, field)
    assert error.message.startswith(message)


def test_a_missing_field_and_a_line_that_is_not_a_map_are_named() -> None:
    with pytest.raises(ListingInputError) as info:
        parse_json_lines(['{"visit_type": "git"}', "[1]", '"x"'])
    assert [str(e) for e in info.value.errors] == [
        "line 1: url: Field required",
        "line 2: (row): Expected `object`, got `array`",
        "line 3: (row): Expected `object`, got `str`",
    ]


@pytest.mark.parametrize(("depth", "refused"), [(250, False), (5000, True)])
def test_deeply_nested_loader_arguments_are_read_or_refused_as_a_line(
    depth: int, refused: bool
) -> None:
    text = '{"url": "https://x/a", "visit_type": "git", "extra_loader_arguments": {"a": '
    text += "[" * depth + "]" * depth + "}}"
    if not refused:
        assert len(parse_json_lines([text])) == 1
        return
    with pytest.raises(ListingInputError, match=r"line 1: \(line\): not JSON"):
        parse_json_lines([text])


def test_a_listed_origin_built_in_code_obeys_the_same_rules() -> None:
    with pytest.raises(ValueError, match=r"^url: Value error, URL must start with a scheme"):
        ListedOriginIn(url="x", visit_type="git")
    naive = datetime(2026, 1, 1)
    with pytest.raises(ValueError, match=r"^last_update: Value error, timestamp needs a time zone"):
        ListedOriginIn(url="https://x/a", visit_type="git", last_update=naive)
    assert listed_origin({"url": "https://x/a", "visit_type": "git"}) == ListedOriginIn(
        url="https://x/a", visit_type="git"
    )
    with pytest.raises(ValueError, match=r"^colour: Extra inputs are not permitted$"):
        listed_origin({"url": "https://x/a", "visit_type": "git", "colour": "red"})


def test_a_csv_listing_reads_its_cells_as_the_fields() -> None:
    rows = parse_csv_rows(
        [
            "url,visit_type,last_update,is_fork,extra_loader_arguments",
            'https://x/a,git,2026-01-01T00:00:00Z,true,"{""a"": 1}"',
            "https://x/b,git,,,",
        ]
    )
    assert [row for _, row in rows] == [
        ListedOriginIn(
            url="https://x/a",
            visit_type="git",
            last_update=datetime(2026, 1, 1, tzinfo=UTC),
            is_fork=True,
            extra_loader_arguments={"a": 1},
        ),
        ListedOriginIn(url="https://x/b", visit_type="git"),
    ]
    with pytest.raises(ListingInputError, match=r"line 2: is_fork: Expected `bool \| null`"):
        parse_csv_rows(["url,visit_type,is_fork", "https://x/c,git,maybe"])
