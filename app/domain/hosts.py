"""Hosters: who serves an origin, and how many visits it may have at once."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit


def hoster_of(url: str) -> str:
    """The host serving ``url``, lower-cased, without credentials or port."""
    host = urlsplit(url).hostname
    return host.lower() if host else "(local)"


def hoster_limit(host: str, limits: Mapping[str, int], default: int | None) -> int | None:
    """Visits of ``host`` allowed at once: its own limit, else the default (None: no limit)."""
    return limits.get(host, default)
