import math
from collections.abc import Callable
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.inputs import rules
from app.inputs.rules import (
    MAX_URL_BYTES,
    check_addresses,
    check_loader_arguments,
    check_url,
    without_userinfo,
)
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


@pytest.mark.parametrize(
    "url",
    [
        "https://user:S3cretPass@forge.example/x.git",
        "https://token@forge.example/x.git",
        "http://@forge.example/x",
    ],
)
def test_a_url_with_credentials_is_refused_without_repeating_them(url: str) -> None:
    with pytest.raises(ValueError, match="user name or password") as info:
        check_url(url)
    assert "S3cret" not in str(info.value)


INTERNAL = [
    ("http://127.0.0.1:6391/", "a loopback address"),
    ("http://127.1/", "a loopback address"),
    ("http://2130706433/", "a loopback address"),
    ("http://0x7f.1/", "a loopback address"),
    ("http://017700000001/", "a loopback address"),
    ("http://0x7f000001/", "a loopback address"),
    ("http://%31%32%37.0.0.1/", "a loopback address"),
    ("http://[::1]:8080/x", "a loopback address"),
    ("http://[::ffff:127.0.0.1]/", "a loopback address"),
    ("http://[::ffff:7f00:1]/", "a loopback address"),
    ("https://169.254.169.254/latest/meta-data", "a link-local address"),
    ("http://[fe80::1%25eth0]/", "a link-local address"),
    ("git://10.1.2.3/x.git", "a private address"),
    ("https://192.168.0.1./x", "a private address"),
    ("https://[fd00::1]/x", "a private address"),
    ("http://0.0.0.0/", "an unspecified address"),
    ("http://0/", "an unspecified address"),
    ("http://[::]/", "an unspecified address"),
    ("http://224.0.0.1/", "a multicast address"),
    ("http://240.0.0.1/", "a reserved address"),
    ("http://100.64.0.1/", "a non-public address"),
    ("http://localhost:5008/", "localhost"),
    ("http://LOCALHOST/", "localhost"),
    ("http://a.localhost/", "localhost"),
    ("file:///etc/passwd", "localhost"),
    ("FILE://localhost/srv/git/a", "localhost"),
    ("http://\uff11\uff12\uff17\u3002\uff10\uff0e\uff10\uff61\uff11/", "a loopback address"),
    (
        "http://" + "".join(chr(0xFF00 + ord(c) - 0x20) for c in "localhost"),
        "localhost",
    ),  # fullwidth
]


@pytest.mark.parametrize(("url", "what"), INTERNAL)
def test_a_url_naming_an_internal_host_is_refused_unless_allowed(
    url: str, what: str, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts([])
    with pytest.raises(ValueError, match=f"names {what} .*REVISIT_ALLOWED_INTERNAL_HOSTS"):
        check_url(url)
    internal_hosts(["*"])
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/a/b",
        "https://8.8.8.8/x",
        "http://134744072/",  # 8.8.8.8
        "https://[2001:4860:4860::8888]/x",
        "https://cafe.example/x",
        "https://deadbeef/x",
        "https://1.2.3.4.5/x",
        "https://999.1.1.1/x",
        "sim://fast1",
    ],
)
def test_public_addresses_and_names_are_accepted(
    url: str, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts([])
    assert check_url(url) == url


def test_the_allowance_names_hosts_and_networks(
    internal_hosts: Callable[[list[str]], None],
) -> None:
    internal_hosts(["localhost", "10.1.0.0/16", "::1"])
    assert check_url("file:///srv/git/a")
    assert check_url("http://localhost/")
    assert check_url("http://10.1.200.3/")
    assert check_url("http://[::1]/")
    for url in ("http://10.2.0.1/", "http://127.0.0.1/", "https://169.254.169.254/"):
        with pytest.raises(ValueError, match="not visited unless"):
            check_url(url)


def test_a_name_resolving_to_an_internal_address_is_refused_unless_allowed(
    internal_hosts: Callable[[list[str]], None],
) -> None:
    internal_hosts([])
    check_addresses("forge.example", ["140.82.121.3", "2606:50c0:8000::153"])
    for found in (["140.82.121.3", "127.0.0.1"], ["::ffff:169.254.169.254"], ["fd00::5"]):
        with pytest.raises(ValueError, match=r"^url: host forge\.example resolves to"):
            check_addresses("forge.example", found)
    internal_hosts(["forge.example"])
    check_addresses("forge.example", ["10.0.0.5"])
    internal_hosts(["10.0.0.0/8"])
    check_addresses("forge.example", ["10.0.0.5"])


@pytest.mark.parametrize(
    "url",
    [
        "https://LOCALHOST:80/",
        "https://localhost./x",
        "https://a.LocalHost/x",
        "https://github.com@127.0.0.1/",
        "https://user@github.com/",
        "FILE://server/x",
        "git://0x7f.0.0.1:9418/x",
    ],
)
def test_urls_that_look_public_at_first_sight_are_still_judged(
    url: str, internal_hosts: Callable[[list[str]], None]
) -> None:
    internal_hosts([])
    with pytest.raises(ValueError, match=r"user name or password|not visited unless"):
        check_url(url)


@given(
    st.text(alphabet="0123456789abcdefxglochst.:@[]-", max_size=20),
    st.sampled_from(["https", "git", "file", "FiLe"]),
)
def test_the_quick_acceptance_never_accepts_what_the_full_judgement_refuses(
    host: str, scheme: str
) -> None:
    url = f"{scheme}://{host}/x"
    if rules._PLAIN_HOST.match(url):
        with patch.object(rules, "_allowed", lambda *_: False):
            assert rules._check_host(url) == url


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("see https://u:S3cret@h.example/x.git.", "see https://***@h.example/x.git."),
        ("git://u:p@ss@h/x and ftp://t@h", "git://***@h/x and ftp://***@h"),
        ("{'url': 'https://t@h/', 'by': 'a@b'}", "{'url': 'https://***@h/', 'by': 'a@b'}"),
        ('{"url":"https://h/x","by":"a@b"}', '{"url":"https://h/x","by":"a@b"}'),
        ("https://h.example/a@b", "https://h.example/a@b"),
    ],
)
def test_without_userinfo_hides_the_credentials_of_every_url_in_a_text_and_nothing_else(
    text: str, redacted: str
) -> None:
    assert without_userinfo(text) == redacted
