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
