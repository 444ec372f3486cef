"""Bounded JSON for what the package keeps on storage: manifests, table versions, recovery sidecars, audit
records and idempotency records all go through :func:`loads` (or :func:`decode`) and :func:`dumps`.

Stored bytes are input like any other: a bug, a partial write or a hostile writer can leave anything under
a key. Decoding therefore refuses, with :class:`StoredJSONError` (a ValueError) and before any value
reaches a caller:

* bodies over :data:`MAX_BYTES` (checked before parsing);
* nesting deeper than :data:`MAX_DEPTH` (found by a linear scan before parsing, so the parser never
  recurses deeply);
* integers outside int64 (judged on their digits, before Python converts them);
* non-finite numbers: ``NaN``, ``Infinity`` and floats that overflow to infinity (``1e400``);
* duplicate object keys (which would make the stored meaning depend on the parser);
* invalid UTF-8, and strings holding lone surrogates (they decode, but could never be encoded again);
* a top level that is not an object.

:func:`dumps` writes canonical JSON and refuses anything :func:`loads` would refuse, so nothing unreadable
is ever written. :func:`field`, :func:`expect`, :func:`items`, :func:`one_of` and :func:`timestamp` check
the decoded values' types, enums and dates, with the same error.
Callers turn a StoredJSONError into their own typed corrupt-data error naming the key (:func:`decode`
does it for them) and leave the object in place.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any, NoReturn, TypeVar

from storage_adapter.errors import StorageError

MAX_BYTES = 32 * 1024 * 1024  # far above any document the package writes (a manifest is ~60 KB)
MAX_DEPTH = 64  # the package's own documents nest 4 deep; idempotency summaries get the rest
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
E = TypeVar("E", bound=Enum)
_MAX_INT_DIGITS = len(str(INT_MAX))  # 19: longer digit strings are out of range, whatever they say

# A JSON string (skipped whole, so brackets inside it do not count) or one bracket.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]|[\]}]', re.DOTALL)
# An escape of a UTF-16 surrogate: the only way a lone surrogate gets into a decoded str.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class StoredJSONError(ValueError):
    """Stored JSON that is malformed, out of bounds, or not of the expected shape (or a value that
    could not be stored and read back)."""


def loads(raw: bytes) -> dict[str, Any]:
    """Decode ``raw`` as one bounded JSON object (see the module docstring). Raises StoredJSONError."""
    if len(raw) > MAX_BYTES:
        raise StoredJSONError(f"{len(raw)} bytes, over the limit of {MAX_BYTES}")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoredJSONError(f"not UTF-8 ({exc})") from exc
    _check_depth(text)
    try:
        document = json.loads(
            text, parse_int=_int, parse_float=_float, parse_constant=_constant, object_pairs_hook=_object
        )
    except json.JSONDecodeError as exc:
        raise StoredJSONError(f"not valid JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise StoredJSONError(f"not a JSON object but {type(document).__name__}")
    if _SURROGATE_ESCAPE.search(text):  # rare: only then pay for a full re-encode
        try:
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise StoredJSONError(f"string with a lone surrogate ({exc.reason})") from exc
    return document


def decode(raw: bytes, key: str, error: type[StorageError]) -> dict[str, Any]:
    """:func:`loads`, raising ``error`` naming ``key`` instead of StoredJSONError (cause chained)."""
    try:
        return loads(raw)
    except StoredJSONError as exc:
        raise error(f"{key}: {exc}; left in place for inspection", key=key) from exc


def dumps(value: Any, *, ensure_ascii: bool = True) -> bytes:
    """Canonical JSON (sorted keys, no whitespace, UTF-8) that :func:`loads` accepts: equal values give
    equal bytes. Raises StoredJSONError for what could not be read back (non-finite floats, integers
    outside int64, too deep, too large, lone surrogates) and TypeError for values JSON cannot represent
    (sets, arbitrary objects, keys of mixed types)."""
    try:
        data = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=ensure_ascii, allow_nan=False
        ).encode("utf-8")
    except RecursionError as exc:
        raise StoredJSONError(f"not storable: nested deeper than {MAX_DEPTH}") from exc
    except ValueError as exc:  # NaN/Infinity, circular references, lone surrogates, huge ints
        raise StoredJSONError(f"not storable: {exc}") from exc
    try:
        loads(data)  # the one definition of readable: what is written can be read back
    except StoredJSONError as exc:
        raise StoredJSONError(f"not storable: {exc}") from exc
    return data


def field(document: Any, name: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
    """``document[name]`` if ``document`` is an object and the value is of ``kind`` (an int is never a
    bool); with ``optional``, None when missing or null. Else StoredJSONError naming the field."""
    if not isinstance(document, Mapping):
        raise StoredJSONError(f"expected an object holding {name!r}, got {type(document).__name__}")
    if name not in document and not optional:
        raise StoredJSONError(f"field {name!r} missing")
    return expect(document.get(name), kind, f"field {name!r}", optional=optional)


def expect(value: Any, kind: type | tuple[type, ...], what: str, *, optional: bool = False) -> Any:
    """``value`` if it is of ``kind`` (or None with ``optional``), else StoredJSONError naming ``what``."""
    if value is None and optional:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds) + (" or null" if optional else "")
        raise StoredJSONError(f"{what} must be {names}, got {type(value).__name__}")
    return value


def items(value: Any, kinds: tuple[type | tuple[type, ...], ...], what: str) -> tuple[Any, ...]:
    """``value`` as a tuple if it is an array of exactly ``len(kinds)`` items of those kinds, in order,
    else StoredJSONError naming ``what``."""
    expect(value, list, what)
    if len(value) != len(kinds):
        raise StoredJSONError(f"{what} must have {len(kinds)} items, got {len(value)}")
    return tuple(
        expect(item, kind, f"{what} item {i}")
        for i, (item, kind) in enumerate(zip(value, kinds, strict=True))
    )


def one_of(kind: type[E], value: str, what: str) -> E:
    """The member of the enum ``kind`` whose value is ``value``, else StoredJSONError naming ``what``."""
    try:
        return kind(value)
    except ValueError:
        raise StoredJSONError(f"unknown {what} {_shown(value)}") from None


def timestamp(value: Any) -> datetime:
    """``value`` parsed as an ISO-8601 timestamp with a time zone, else StoredJSONError."""
    text = expect(value, str, "timestamp")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise StoredJSONError(f"unparseable timestamp {_shown(text)}") from exc
    if moment.tzinfo is None:
        raise StoredJSONError(f"timestamp {_shown(text)} has no time zone")
    return moment


def _check_depth(text: str) -> None:
    depth = 0
    for match in _STRUCTURE.finditer(text):
        bracket = match.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise StoredJSONError(f"nested deeper than {MAX_DEPTH}")
        elif bracket in "]}":
            depth -= 1


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
        _refuse_number(digits)
    value = int(digits)
    if not INT_MIN <= value <= INT_MAX:
        _refuse_number(digits)
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _refuse_number(text)
    return value


def _constant(name: str) -> NoReturn:
    raise StoredJSONError(f"non-finite number {name}")


def _refuse_number(text: str) -> NoReturn:
    raise StoredJSONError(f"number {_shown(text)} out of range (integers: int64; floats: finite)")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        duplicate = next(name for name, count in Counter(name for name, _ in pairs).items() if count > 1)
        raise StoredJSONError(f"duplicate key {_shown(duplicate)}")
    return document


def _shown(text: str) -> str:
    """``text`` for a message: repr'd, and cut short (stored strings may be megabytes)."""
    return repr(text) if len(text) <= 64 else repr(text[:64]) + "..."
