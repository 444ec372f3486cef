"""Key validation: every key and prefix is checked before any I/O.

A valid key is a ``/``-separated relative path of 1 to 1024 UTF-8 bytes whose segments are non-empty,
are not ``.`` or ``..``, contain no backslash and no control character (U+0000-U+001F, U+007F).
Two shapes are reserved because they collide with how object stores keep their own bookkeeping:

* a segment ending in ``#`` followed only by digits (object_store's LocalFileSystem stages uploads as
  ``name#N`` and never lists such files, so the object would be invisible on local storage);
* the top-level segment ``.storage-adapter`` (reserved for the adapter's own metadata).

These rules are identical on every backend, so a key that works on memory works on local and S3.
"""

from __future__ import annotations

import re

from storage_adapter.errors import InvalidKeyError

MAX_KEY_BYTES = 1024
RESERVED_TOP_SEGMENT = ".storage-adapter"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_STAGING_SUFFIX = re.compile(r"#\d+$")


def _reject(key: str, reason: str, backend: str | None) -> InvalidKeyError:
    where = f" on {backend}" if backend else ""
    return InvalidKeyError(f"invalid key {key!r}{where}: {reason}", key=key, backend=backend)


def validate_key(key: object, backend: str | None = None) -> str:
    """Return ``key`` unchanged if it is a valid object key, else raise :class:`InvalidKeyError`."""
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
    if segments[0] == RESERVED_TOP_SEGMENT:
        raise _reject(key, f"the top-level {RESERVED_TOP_SEGMENT!r} prefix is reserved", backend)
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
