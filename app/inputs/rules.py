"""The rules every origin URL and loader argument obeys, wherever it comes from.

One copy, shared by listing import (CLI, RPC and API), visit requests, the
client and the journal client, so a value PostgreSQL would refuse (a NUL, text
that is not UTF-8, a URL too long for a btree index entry) is refused first,
naming the field, before anything is written.

The same rules keep visits off the workers' own network: a URL with a user
name or password is refused (never stored, so never shown or published), and
so is one naming an internal host (``localhost``, a loopback, private,
link-local, unspecified, multicast or reserved address, in any of the forms
the C resolver reads: ``127.1``, ``2130706433``, ``0x7f.1``, ``[::ffff:7f00:1]``)
or a ``file://`` URL (the worker's own disk, ``localhost`` by RFC 8089),
unless ``REVISIT_ALLOWED_INTERNAL_HOSTS`` allows it. The loaders check the
addresses a host name resolves to with ``check_addresses`` at visit time.
"""

from __future__ import annotations

import ipaddress
import json
import re
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Annotated, Any
from urllib.parse import unquote

from pydantic import AfterValidator

from app.settings import get_settings

#: Longest URL accepted, in UTF-8 bytes: PostgreSQL's btree entries (the
#: (url, visit_type) indexes) hold at most 2704 bytes.
MAX_URL_BYTES = 2048
#: Longest ``extra_loader_arguments``, as compact JSON, in bytes: the archive's
#: listers send tens of KB (a package's artifacts: 40 KB from the gnu lister), and
#: every visit message carries them, so a visit type's queue of 1,000 messages
#: holds at most a GiB of them in Redis.
MAX_LOADER_ARGUMENTS_BYTES = 1024 * 1024
#: A visit type's name: it names the Dramatiq queues ``visit.<name>.<lane>``,
#: the Redis hash tag ``{<name>}`` and the Prometheus label values. The
#: reference's names fit (git, tarball-directory, svn-export, pypi...).
VISIT_TYPE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: Latest Unix time a listing may say it started (9999-12-31).
MAX_TIMESTAMP_S = 253_402_300_799.0

#: Earliest ``last_update`` a listing may report: Unix time 0. No origin is
#: older; an earlier date is a placeholder (0001-01-01) that would put the
#: origin first in the pools ordered by last update.
MIN_LAST_UPDATE = datetime(1970, 1, 1, tzinfo=UTC)
#: How far past this host's clock a ``last_update`` may be: a forge's clock
#: ahead, a time zone slip. Beyond it is a placeholder (9999-12-31) or a bug.
LAST_UPDATE_SLACK = timedelta(days=1)

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.")
#: A URL that surely holds no credentials and names no internal host: not
#: ``file``, no ``@`` in its authority, a host whose last label has a letter
#: no IPv4 form holds (g-z but x) and is not ``localhost``. Any other URL is
#: judged by _check_host.
_PLAIN_HOST = re.compile(
    r"^(?![Ff][Ii][Ll][Ee]:)[A-Za-z][A-Za-z0-9+.-]*://(?![^/?#]*@)(?:[A-Za-z0-9_-]+\.)*"
    r"(?!(?i:localhost)\.?(?:[:/?#]|$))[A-Za-z0-9_-]*[G-WYZg-wyz][A-Za-z0-9_-]*\.?"
    r"(?::[0-9]*)?(?:[/?#]|$)"
)
#: Scheme and authority (``user@host:port``) of a ``scheme://`` URL.
_AUTHORITY = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)")
#: The user name and password of a ``scheme://`` URL inside any text (a log line,
#: JSON: no quote or backslash, so a match stays inside one JSON string).
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s\"\\]*@")
#: A host that may be an address literal (IPv4 in any inet_aton form, IPv6 in
#: brackets) or localhost; any other host is a name, checked at visit time.
_MAYBE_LITERAL = re.compile(r"^(?:\[.*\]|[0-9a-fx.]+|(?:.*\.)?localhost)$")
#: The full stops IDNA reads as ".".
_IDNA_DOTS = str.maketrans("\u3002\uff0e\uff61", "...")
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid UTF-8 text") from None


def check_url(url: str) -> str:
    """``url`` if it is an origin URL revisit can store and a loader can read:
    ``scheme://...``, no whitespace or control character, at most MAX_URL_BYTES."""
    # The usual URL, in one pass of C string methods (a bulk listing checks
    # millions): for ASCII text, length is size in bytes and isprintable() is
    # false exactly for the control characters _FORBIDDEN names but space.
    if (
        url.isascii()
        and len(url) <= MAX_URL_BYTES
        and url.isprintable()
        and " " not in url
        and _PLAIN_HOST.match(url)
    ):
        return url
    size = len(_utf8(url))
    if size > MAX_URL_BYTES:
        raise ValueError(f"URL of {size} bytes, longer than {MAX_URL_BYTES}")
    if bad := _FORBIDDEN.search(url):
        raise ValueError(f"URL holds a forbidden character {bad.group()!r} at {bad.start()}")
    if not _SCHEME.match(url):
        raise ValueError("URL must start with a scheme, e.g. https://")
    return _check_host(url)


def _check_host(url: str) -> str:
    """``url`` if it carries no credentials and names no internal host (unless allowed)."""
    match = _AUTHORITY.match(url)
    if match is None:  # pragma: no cover - check_url matched _SCHEME first
        return url
    scheme, authority = match.group(1).lower(), match.group(2)
    if "@" in authority:
        raise ValueError(
            "URL holds a user name or password (user:password@host): revisit stores no "
            "credentials; give the URL without them"
        )
    host = "localhost" if scheme == "file" else url_host(authority)
    if not host.isascii():  # as IDNA reads it: fullwidth digits, ideographic dots
        host = unicodedata.normalize("NFKC", host).translate(_IDNA_DOTS)
    if _MAYBE_LITERAL.match(host):
        what = internal(host)
        if what is not None and not _allowed(host, None):
            raise ValueError(
                f"URL names {what} ({'file://' if scheme == 'file' else host}), which is "
                "not visited unless REVISIT_ALLOWED_INTERNAL_HOSTS allows it"
            )
    return url


def without_userinfo(text: str) -> str:
    """``text`` with the user name and password of every ``scheme://user:password@``
    URL in it replaced by ``***``: what a refusal may quote of what it refused."""
    return _USERINFO.sub(r"\1***@", text)


def url_host(authority: str) -> str:
    """The host of a URL's ``authority`` (``user@host:port``), lower case, without
    brackets' port or a trailing dot, percent-decoded (as curl reads it)."""
    host = unquote(authority.rpartition("@")[2]).lower()
    if host.startswith("["):
        host = host[: host.find("]") + 1] if "]" in host else host
    else:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _ipv4(host: str) -> ipaddress.IPv4Address | None:
    """``host`` read as inet_aton reads it (``127.1``, ``0x7f.1``, ``017700000001``,
    ``2130706433``), None if it is no IPv4 address."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        try:
            if part[:2] in ("0x", "0X"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part[1:], 8))
            else:
                numbers.append(int(part, 10))
        except ValueError:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def address(host: str) -> _Address | None:
    """The address ``host`` is a literal of (IPv4-mapped IPv6 as its IPv4), else None."""
    if host.startswith("["):
        host = host[1:-1]
    try:
        found: _Address | None = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        found = _ipv4(host)
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def internal(host: str) -> str | None:
    """What internal host ``host`` names (e.g. ``a loopback address``), None for a
    public address or any other name."""
    if host == "localhost" or host.endswith(".localhost"):
        return "localhost"
    found = address(host)
    return None if found is None else internal_address(found)


def internal_address(found: _Address) -> str | None:
    """What kind of internal address ``found`` is, None for a global one."""
    for kind, test in (
        ("an unspecified", found.is_unspecified),
        ("a loopback", found.is_loopback),
        ("a link-local", found.is_link_local),
        ("a multicast", found.is_multicast),
        ("a reserved", found.is_reserved),
        ("a private", found.is_private),
        ("a non-public", not found.is_global),  # shared (CGNAT), documentation...
    ):
        if test:
            return f"{kind} address"
    return None


@lru_cache(maxsize=4)
def _allowance(entries: tuple[str, ...]) -> tuple[frozenset[str], tuple[_Network, ...]]:
    """The host names and the networks of REVISIT_ALLOWED_INTERNAL_HOSTS."""
    names = {e.lower().rstrip(".") for e in entries if not _is_network(e)}
    networks = tuple(ipaddress.ip_network(e, strict=False) for e in entries if _is_network(e))
    return frozenset(names), networks


def _is_network(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return True


def _allowed(host: str, found: _Address | None) -> bool:
    """Whether REVISIT_ALLOWED_INTERNAL_HOSTS lets visits reach ``host`` (at ``found``)."""
    names, networks = _allowance(tuple(get_settings().allowed_internal_hosts))
    if "*" in names or host in names:
        return True
    found = found or address(host)
    return found is not None and any(found in network for network in networks)


def check_addresses(host: str, addresses: Iterable[str]) -> None:
    """Refuse (ValueError) a visit to ``host`` when one of the ``addresses`` it
    resolves to is internal and not allowed: DNS cannot smuggle in what a
    literal could not."""
    for text in addresses:
        found = address(text)
        what = None if found is None else internal_address(found)
        if what is not None and not _allowed(host, found):
            raise ValueError(
                f"url: host {host} resolves to {what} ({text}), which is not visited unless "
                "REVISIT_ALLOWED_INTERNAL_HOSTS allows it"
            )


def check_last_update(value: datetime, now: datetime) -> datetime:
    """``value`` if it lies between MIN_LAST_UPDATE and ``now`` + LAST_UPDATE_SLACK."""
    if value < MIN_LAST_UPDATE:
        raise ValueError(f"{value.isoformat()} is before 1970-01-01, no origin is that old")
    if value > now + LAST_UPDATE_SLACK:
        raise ValueError(
            f"{value.isoformat()} is more than {LAST_UPDATE_SLACK.days} day past now "
            f"({now.isoformat(timespec='seconds')})"
        )
    return value


def strings_in(value: Any) -> list[str]:
    """Every string in the JSON-like ``value``: itself, its keys, values and items."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings_in(k), *strings_in(v))]
    if isinstance(value, list):
        return [s for item in value for s in strings_in(item)]
    return []


def check_loader_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` if PostgreSQL's jsonb takes them: UTF-8 text without NUL,
    finite numbers, at most MAX_LOADER_ARGUMENTS_BYTES of JSON."""
    for text in strings_in(arguments):
        check_text(text)
    try:
        size = len(json.dumps(arguments, separators=(",", ":"), allow_nan=False).encode("utf-8"))
    except ValueError:  # the one ValueError of json.dumps on decoded JSON
        raise ValueError("holds a number that is not finite (NaN or infinity)") from None
    if size > MAX_LOADER_ARGUMENTS_BYTES:
        raise ValueError(f"{size} bytes of JSON, more than {MAX_LOADER_ARGUMENTS_BYTES}")
    return arguments


def check_visit_type(name: str) -> str:
    """``name`` if it can name a visit type: 1 to 64 lower case letters, digits,
    ``-``, ``_`` and ``.``, starting with a letter or a digit."""
    if not VISIT_TYPE_NAME.match(name):
        raise ValueError(
            f"{name!r} cannot name a visit type: 1 to 64 lower case letters, digits, '-', '_' "
            "or '.', starting with a letter or digit (it names queues and Redis keys)"
        )
    return name


def check_text(text: str) -> str:
    """``text`` if PostgreSQL's text takes it: UTF-8, no NUL."""
    _utf8(text)
    if "\x00" in text:
        raise ValueError("holds a NUL character, which PostgreSQL cannot store")
    return text


#: An origin URL (pydantic field type).
OriginUrl = Annotated[str, AfterValidator(check_url)]
#: A visit's extra loader arguments (pydantic field type).
LoaderArguments = Annotated[dict[str, Any], AfterValidator(check_loader_arguments)]
#: A visit type's name (pydantic field type).
VisitTypeName = Annotated[str, AfterValidator(check_visit_type)]
#: Free text stored as is (pydantic field type).
StoredText = Annotated[str, AfterValidator(check_text)]
