"""Key validation: every key and prefix is checked before any I/O.

A valid key is a ``/``-separated relative path of 1 to 1024 UTF-8 bytes whose segments are non-empty,
are not ``.`` or ``..``, contain no backslash and no control character (U+0000-U+001F, U+007F).
One shape is reserved because it collides with local bookkeeping: a segment ending in ``#`` followed
only by digits (object_store's LocalFileSystem stages uploads as ``name#N`` and never lists such files,
and the local backend stages its writes the same way, so such an object would be invisible).

These rules are identical on every backend, so a key that works on memory works on local and S3.
"""

from __future__ import annotations

import re

from storage_adapter.errors import InvalidKeyError

MAX_KEY_BYTES = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_STAGING_SUFFIX = re.compile(r"#\d+$")
# Fast path for the common case (validation runs on every call): non-empty segments without control
# characters or backslashes, none of them "." or ".." or ending in "#<digits>", at most 256 characters
# (so at most 1024 UTF-8 bytes). Anything else takes the detailed path, which names the reason.
_PLAIN_SEGMENT = r"(?!\.\.?(?:/|$))[^\x00-\x1f\x7f\\/]*[^\x00-\x1f\x7f\\/#]"
_PLAIN_KEY = re.compile(rf"(?!.*#\d+(?:/|$)){_PLAIN_SEGMENT}(?:/{_PLAIN_SEGMENT})*")


def _reject(key: str, reason: str, backend: str | None) -> InvalidKeyError:
    where = f" on {backend}" if backend else ""
    return InvalidKeyError(f"invalid key {key!r}{where}: {reason}", key=key, backend=backend)


def validate_key(key: object, backend: str | None = None) -> str:
    """Return ``key`` unchanged if it is a valid object key, else raise :class:`InvalidKeyError`."""
    if isinstance(key, str) and len(key) <= MAX_KEY_BYTES // 4 and _PLAIN_KEY.fullmatch(key):
        return key
    if not isinstance(key, str):
        raise _reject(repr(key), f"keys are str, not {type(key).__name__}", backend)
    if key == "":
        raise _reject(key, "empty key", backend)
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise _reject(key[:64] + "...", f"longer than {MAX_KEY_BYTES} bytes", backend)
    if key.startswith("/"):
        raise _reject(key, "leading '/' (keys are relative to the adapter's root)", backend)
    if "\\" in key:
        raise _reject(key, "backslash", backend)
    if _CONTROL.search(key):
        raise _reject(key, "NUL or control character", backend)
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise _reject(key, "not valid UTF-8 (lone surrogate)", backend) from None
    segments = key.split("/")
    for segment in segments:
        if segment == "":
            raise _reject(key, "empty segment ('//' or trailing '/')", backend)
        if segment in (".", ".."):
            raise _reject(key, f"{segment!r} segment", backend)
        if _STAGING_SUFFIX.search(segment):
            raise _reject(key, "segment ending in '#<digits>' is reserved for staging files", backend)
    return key


def validate_prefix(prefix: object, backend: str | None = None) -> str:
    """Validate a listing/deletion prefix and return it without its trailing ``/``.

    ``""`` means the whole root. A prefix names whole segments: ``a/b`` covers ``a/b/...`` and never
    ``a/bc``.
    """
    if isinstance(prefix, str) and prefix in ("", "/"):
        return ""
    if isinstance(prefix, str) and prefix.endswith("/"):
        prefix = prefix[:-1]
    return validate_key(prefix, backend)


def join_key(prefix: str, key: str) -> str:
    """Join a validated root prefix (possibly empty) and a validated key."""
    return f"{prefix}/{key}" if prefix else key
