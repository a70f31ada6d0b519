"""Hosters: who serves an origin, and how many visits it may have at once."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit


def hoster_of(url: str) -> str:
    """The host serving ``url``, lower-cased, without credentials or port."""
    host = urlsplit(url).hostname
    return host.lower() if host else "(local)"


#: The key of ``REVISIT_HOSTER_LIMITS`` that limits every hoster not named.
ANY_HOSTER = "*"


def hoster_limit(host: str, limits: Mapping[str, int]) -> int | None:
    """Visits of ``host`` allowed at once: its own limit, else the ``"*"`` one (None:
    no limit)."""
    return limits.get(host, limits.get(ANY_HOSTER))
