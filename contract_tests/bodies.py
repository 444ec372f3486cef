"""Self-verifying object bodies: a reader can tell a whole body from a torn, empty or mixed one.

Every body is unique to its tag, which also keeps S3 ETags (content MD5s) unique in CAS races.
"""

from __future__ import annotations

import hashlib


def make_body(tag: str, size: int = 4096) -> bytes:
    """``tag|size|`` followed by a filler derived from the tag, ``size`` bytes in all (at least the header)."""
    header = f"{tag}|{size}|".encode()
    seed = hashlib.sha256(tag.encode()).digest()
    filler_len = max(0, size - len(header))
    filler = (seed * (filler_len // len(seed) + 1))[:filler_len]
    return header + filler


def body_is_whole(data: bytes) -> bool:
    """True if ``data`` is exactly some ``make_body(tag, size)``."""
    try:
        tag, size, _ = data.decode("latin-1").split("|", 2)
        return data == make_body(tag, int(size))
    except ValueError:
        return False


# How much of a byte string a message shows: a log line must stay readable whatever a store answered.
SHOWN_TEXT_BYTES = 40
SHOWN_HEX_BYTES = 8
# Bytes shown as themselves: printable ASCII, and the whitespace a bytes literal escapes readably.
_TEXT_BYTES = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


def describe(value: object) -> str:
    """``value`` as a clause's message shows it: the one way every clause puts bytes into evidence.

    Bytes (``bytes``, ``bytearray``, ``memoryview``) that are short text read as their literal
    (``b'first'``); any others as their length, the text they start with (at most ``SHOWN_TEXT_BYTES``,
    as a bytes literal) and the next ``SHOWN_HEX_BYTES`` in hex, ``...`` where more follow: a torn read of
    half a 262144-byte body shows as ``131072 bytes b'v6|262144|>' + 0x8286044388886ee0...``, not as pages
    of escapes. Tuples, lists and dicts show their items the same way; anything else is its ``repr``.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _describe_bytes(bytes(value))
    if isinstance(value, tuple):
        inner = ", ".join(map(describe, value))
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(map(describe, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{describe(k)}: {describe(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _describe_bytes(data: bytes) -> str:
    text = 0
    while text < min(len(data), SHOWN_TEXT_BYTES) and data[text] in _TEXT_BYTES:
        text += 1
    if text == len(data):
        return repr(data)
    shown = [f"{len(data)} byte{'' if len(data) == 1 else 's'}"]
    if text:
        shown.append(repr(data[:text]))
    rest = data[text:]
    if text == SHOWN_TEXT_BYTES and rest[0] in _TEXT_BYTES:  # text cut short, not ended
        shown[-1] += "..."
    else:
        more = "..." if len(rest) > SHOWN_HEX_BYTES else ""
        shown.append(("+ " if text else "") + "0x" + rest[:SHOWN_HEX_BYTES].hex() + more)
    return " ".join(shown)
