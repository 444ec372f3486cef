"""Key validation: every key and prefix is checked before any I/O, by the same rules on every backend.

A valid key is a ``str``, a ``/``-separated relative path whose every rule is counted in UTF-8 bytes:

* **Encodable.** It encodes as UTF-8: a lone surrogate (``"\\udc80"``, e.g. from ``os.fsdecode`` of an
  undecodable file name) is refused, since no backend can store or list such a name.
* **Length.** 1 to ``MAX_KEY_BYTES`` (1024) bytes in all, so a 600-character key of 1,200 bytes is too
  long and a 1,024-byte key is fine. Each segment is 1 to ``MAX_SEGMENT_BYTES`` (200) bytes: local files
  are limited to 255 bytes per name and a local write stages its bytes in ``<name>#<12 digits>`` beside
  the object, so 200 leaves room for that suffix with a margin; the limit holds on every backend so that
  a key valid on memory or S3 is valid on local too.
* **Shape.** No empty segment (no leading ``/``, ``//`` or trailing ``/``), no ``.`` or ``..`` segment,
  no backslash, no control character (U+0000-U+001F, U+007F).
* **Reserved.** No segment, inner or last, ends in ``#`` followed only by ASCII or Unicode digits: that is
  the shape of local staging files (object_store's LocalFileSystem and the local backend), which are
  never listed, so such an object (or everything below such a directory) would be invisible.

Everything else is an ordinary name, stored and listed byte for byte, without Unicode normalization:
spaces (also leading or trailing), non-ASCII letters, ``%``, ``+``, ``?``, ``#`` not followed by digits
only, names starting with dots (``.hidden``, ``...``).

A prefix (for ``list``, ``list_dir``, ``delete_prefix``, ``child`` and a URL's path) obeys the same
rules, except that ``""`` and ``"/"`` mean the root and one trailing ``/`` is dropped.
"""

from __future__ import annotations

import re

from storage_adapter.errors import InvalidKeyError

MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_plain_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 and holds no control character: what every key segment and every
    text option must be (one rule, so an option can always be printed and sent like a key)."""
    if _CONTROL.search(text):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_STAGING_SUFFIX = re.compile(r"#\d+$")
# Fast path for the common case (validation runs on every call), for ASCII keys only, where characters
# are bytes: segments of 1 to MAX_SEGMENT_BYTES characters without control characters or backslashes,
# none of them "." or ".." or ending in "#<digits>". Anything else (non-ASCII included) takes the detailed
# path, which names the reason.
_PLAIN_SEGMENT = rf"(?!\.\.?(?:/|$))[^\x00-\x1f\x7f\\/]{{0,{MAX_SEGMENT_BYTES - 1}}}[^\x00-\x1f\x7f\\/#]"
_PLAIN_KEY = re.compile(rf"(?!.*#\d+(?:/|$)){_PLAIN_SEGMENT}(?:/{_PLAIN_SEGMENT})*", re.ASCII)


def _reject(key: str, reason: str, backend: str | None) -> InvalidKeyError:
    where = f" on {backend}" if backend else ""
    return InvalidKeyError(f"invalid key {key!r}{where}: {reason}", key=key, backend=backend)


def is_plain_key(key: str) -> bool:
    """The fast path of the rules: True for an ASCII key that obeys them all (most keys); False says
    nothing (ask :func:`key_problem`)."""
    return key.isascii() and len(key) <= MAX_KEY_BYTES and _PLAIN_KEY.fullmatch(key) is not None


def key_problem(key: str) -> str | None:
    """The rule the str ``key`` breaks, None if it is a valid key. A listing asks this of every name a
    store holds (storage_adapter.listing); :func:`validate_key` raises with it."""
    if is_plain_key(key):
        return None
    return _whole_key_problem(key) or _shape_problem(key)


def _whole_key_problem(key: str) -> str | None:
    """A rule the key as a whole breaks (empty, not UTF-8, too long): such a key is shown shortened."""
    if key == "":
        return "empty key"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return f"not encodable as UTF-8 (lone surrogate at character {exc.start})"
    if size > MAX_KEY_BYTES:
        return f"longer than {MAX_KEY_BYTES} bytes"
    return None


def _shape_problem(key: str) -> str | None:
    """A rule of the key's shape it breaks, for a key that is UTF-8 and not too long."""
    if key.startswith("/"):
        return "leading '/' (keys are relative to the adapter's root)"
    if "\\" in key:
        return "backslash"
    if _CONTROL.search(key):
        return "NUL or control character"
    for segment in key.split("/"):
        if segment == "":
            return "empty segment ('//' or trailing '/')"
        if segment in (".", ".."):
            return f"{segment!r} segment"
        if _STAGING_SUFFIX.search(segment):
            return "segment ending in '#<digits>' is reserved for staging files"
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            return f"segment longer than {MAX_SEGMENT_BYTES} bytes"
    return None


def validate_key(key: object, backend: str | None = None) -> str:
    """Return ``key`` unchanged if it is a valid object key (the module's rules), else raise
    :class:`InvalidKeyError` naming the key, the backend and the broken rule."""
    if isinstance(key, str) and is_plain_key(key):
        return key
    if not isinstance(key, str):
        raise _reject(repr(key), f"keys are str, not {type(key).__name__}", backend)
    whole = _whole_key_problem(key)
    if whole is not None:
        raise _reject(key if len(key) <= 64 else key[:64] + "...", whole, backend)
    shape = _shape_problem(key)
    if shape is not None:
        raise _reject(key, shape, backend)
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
