"""The reference's RPC wire format (``swh.core.api.serializers``), msgpack side.

Bodies are msgpack with ``datetime`` as the msgpack Timestamp extension
(type -1, UTC), integers beyond 64 bits as extension types 1 (positive) and
2 (negative, magnitude), and other types as a two-key map
``{b"swhtype": name, b"d": value}`` (keys are msgpack bin):

| swhtype | value |
|---|---|
| ``uuid`` | its text |
| ``timedelta`` | map of days, seconds, microseconds |
| ``datetime`` | ISO 8601 text (older clients) |
| ``paged_result`` | map of results, next_page_token, total_results |
| ``scheduler_model`` | map of the model's fields plus ``__type__`` (its class name) |
| ``last_visit_status`` | successful, failed or not_found |

Decoding keeps models as plain dicts (``__type__`` included): the lister
interface validates them. Errors travel as a map of type, module, args,
message and traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import msgpack
from pydantic import BaseModel

from app.listers.models import ListedOriginPage

_LONG_INT, _LONG_NEG_INT = 1, 2
_TYPE, _DATA = b"swhtype", b"d"


class UndecodableBody(ValueError):
    """The request body is not the reference's msgpack."""


def _tagged(name: str, value: Any) -> dict[bytes, Any]:
    return {_TYPE: name, _DATA: value}


def _encode_other(obj: Any) -> Any:
    if isinstance(obj, int):  # beyond msgpack's 64 bits
        code, magnitude = (_LONG_INT, obj) if obj > 0 else (_LONG_NEG_INT, -obj)
        return msgpack.ExtType(code, magnitude.to_bytes((magnitude.bit_length() + 7) // 8, "big"))
    if isinstance(obj, UUID):
        return _tagged("uuid", str(obj))
    if isinstance(obj, timedelta):
        return _tagged(
            "timedelta",
            {"days": obj.days, "seconds": obj.seconds, "microseconds": obj.microseconds},
        )
    if isinstance(obj, ListedOriginPage):
        page = {
            "results": obj.results,
            "next_page_token": list(obj.next_page_token) if obj.next_page_token else None,
            "total_results": None,
        }
        return _tagged("paged_result", page)
    if isinstance(obj, BaseModel):
        fields = {name: getattr(obj, name) for name in type(obj).model_fields}
        return _tagged("scheduler_model", {**fields, "__type__": type(obj).__name__})
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def encode(data: Any) -> bytes:
    """``data`` as the reference's msgpack."""
    packed: bytes = msgpack.packb(data, use_bin_type=True, datetime=True, default=_encode_other)
    return packed


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "uuid": UUID,
    "timedelta": lambda d: timedelta(**d),
    "datetime": datetime.fromisoformat,
    "paged_result": lambda d: d,
    "scheduler_model": lambda d: d,
    "last_visit_status": lambda d: d,
}


def _decode_tagged(obj: dict[Any, Any]) -> Any:
    if obj.keys() == {_TYPE, _DATA}:
        decoder = _DECODERS.get(obj[_TYPE])
        if decoder is not None:
            return decoder(obj[_DATA])
    return obj


def _ext(code: int, data: bytes) -> int:
    if code == _LONG_INT:
        return int.from_bytes(data, "big")
    if code == _LONG_NEG_INT:
        return -int.from_bytes(data, "big")
    raise ValueError(f"unknown msgpack extension type {code}")


def decode(body: bytes) -> Any:
    """A request body in the reference's msgpack; UndecodableBody if it is not."""
    try:
        return msgpack.unpackb(
            body,
            raw=False,
            object_hook=_decode_tagged,
            ext_hook=_ext,
            strict_map_key=False,
            timestamp=3,  # Timestamp extension -> aware datetime (UTC)
        )
    except Exception as exc:  # msgpack raises several unrelated types
        raise UndecodableBody(f"body: not the reference's msgpack: {exc}") from None


def encode_error(type_name: str, module: str, message: str) -> bytes:
    """An error as the reference's client decodes it (and re-raises, for its own
    exception types such as ``StaleData``)."""
    return encode(
        {
            "type": type_name,
            "module": module,
            "args": [message],
            "message": message,
            "traceback": [],
        }
    )
