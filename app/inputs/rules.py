"""The rules every origin URL and loader argument obeys, wherever it comes from.

One copy, shared by listing import (CLI and API), visit requests and the
client, so a value PostgreSQL would refuse (a NUL, text that is not UTF-8, a
URL too long for a btree index entry) is refused first, naming the field,
before anything is written.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator

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

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.")
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
        and _SCHEME.match(url)
    ):
        return url
    size = len(_utf8(url))
    if size > MAX_URL_BYTES:
        raise ValueError(f"URL of {size} bytes, longer than {MAX_URL_BYTES}")
    if bad := _FORBIDDEN.search(url):
        raise ValueError(f"URL holds a forbidden character {bad.group()!r} at {bad.start()}")
    if not _SCHEME.match(url):
        raise ValueError("URL must start with a scheme, e.g. https://")
    return url


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def check_loader_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` if PostgreSQL's jsonb takes them: UTF-8 text without NUL,
    finite numbers, at most MAX_LOADER_ARGUMENTS_BYTES of JSON."""
    for text in _strings(arguments):
        _utf8(text)
        if "\x00" in text:
            raise ValueError("holds a NUL character, which PostgreSQL cannot store")
    if not _finite(arguments):
        raise ValueError("holds a number that is not finite (NaN or infinity)")
    size = len(json.dumps(arguments, separators=(",", ":")).encode("utf-8"))
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
