import math

import pytest

from app.inputs.rules import MAX_URL_BYTES, check_loader_arguments, check_url
from app.loaders.base import VisitResult, checked_result

#: What app.inputs.rules refuses in a URL: control characters, space and DEL.
_FORBIDDEN_CHARS = {chr(c) for c in range(0x21)} | {"\x7f"}


@pytest.mark.parametrize(
    "url",
    ["https://forge.example/a/b.git", "sim://fast1", "file:///srv/repo", "svn+ssh://h/x"],
)
def test_urls_loaders_read_are_accepted(url: str) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("forge.example/a", "must start with a scheme"),
        ("https://", "must start with a scheme"),
        ("https://a b", "forbidden character ' '"),
        ("https://a\x00b", "forbidden character '\\x00'"),
        ("https://a/\udce9", "not valid UTF-8"),
        ("https://a/" + "é" * 1020, "URL of 2050 bytes, longer than 2048"),
    ],
)
def test_urls_postgres_or_loaders_cannot_take_are_refused(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("\\", "\\\\").replace("(", "\\(")):
        check_url(url)


@pytest.mark.parametrize("char", [chr(c) for c in range(128)])
def test_every_ascii_character_in_a_url_is_judged_as_the_forbidden_set_says(char: str) -> None:
    url = f"https://forge.example/a{char}b"
    if char in _FORBIDDEN_CHARS:
        with pytest.raises(ValueError, match="forbidden character"):
            check_url(url)
    else:
        assert check_url(url) == url


def test_an_ascii_url_at_the_size_limit_is_accepted_and_one_byte_more_refused() -> None:
    base = "https://x/"
    assert check_url(base + "a" * (MAX_URL_BYTES - len(base)))
    with pytest.raises(ValueError, match="longer than"):
        check_url(base + "a" * (MAX_URL_BYTES - len(base) + 1))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"a": "x\x00"}, "NUL"),
        ({"a\x00": 1}, "NUL"),
        ({"a": [{"b": math.inf}]}, "not finite"),
        ({"a": "x" * (1024 * 1024)}, "more than 1048576"),
    ],
)
def test_loader_arguments_jsonb_cannot_take_are_refused(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_loader_arguments(arguments)


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (VisitResult("junk", None, 1.0), "status 'junk'"),
        (VisitResult("full", b"short", 1.0), "snapshot b'short'"),
        (VisitResult("full", None, math.nan), "duration_s nan"),
        ("not a result", "invalid loader result: 'not a result'"),
    ],
)
def test_an_invalid_loader_result_becomes_a_failed_visit_saying_why(
    result: object, reason: str
) -> None:
    checked = checked_result(result, 2.0)
    assert checked.status == "failed"
    assert checked.error is not None and reason in checked.error


def test_a_valid_loader_result_is_published_as_is() -> None:
    result = VisitResult("full", b"s" * 20, 1.5)
    assert checked_result(result, 9.0) is result
