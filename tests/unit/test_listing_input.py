import pytest

from app.listing_input import ListingInputError, check_visit_types, parse_json_lines


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


def test_unknown_visit_type_is_refused_with_the_known_list() -> None:
    rows = parse_json_lines(['{"url": "https://a", "visit_type": "cvs"}'])
    with pytest.raises(
        ListingInputError, match=r"line 1: visit_type: unknown visit type 'cvs' \(known: git, hg\)"
    ):
        check_visit_types(rows, {"git", "hg"})
