"""Idempotency-Key formats: what a client may send as a key. UUIDs by default (the Iceberg REST spec asks
for UUIDv7 strings); any other format is a regular expression plus a length bound."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from dataclasses import dataclass

from storage_adapter.idempotency.errors import InvalidIdempotencyKeyError


@dataclass(frozen=True)
class KeyFormat:
    """A key format: a full-match regular expression and a maximum length in characters."""

    name: str
    pattern: str
    max_length: int = 128

    def validate(self, key: object) -> str:
        """Return ``key`` if it is a str in this format, else raise InvalidIdempotencyKeyError."""
        if key is None or key == "":
            raise InvalidIdempotencyKeyError("missing Idempotency-Key")
        if not isinstance(key, str):
            raise InvalidIdempotencyKeyError(f"Idempotency-Key must be a str, not {type(key).__name__}")
        if len(key) > self.max_length or re.fullmatch(self.pattern, key) is None:
            shown = key if len(key) <= 64 else key[:64] + "..."
            raise InvalidIdempotencyKeyError(
                f"malformed Idempotency-Key {shown!r}: expected {self.name}", key=shown
            )
        return key


_HEX = "[0-9a-f]"
UUID_KEYS = KeyFormat(
    "a canonical lowercase UUID", f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}", 36
)
UUIDV7_KEYS = KeyFormat(
    "a canonical lowercase UUIDv7", f"{_HEX}{{8}}-{_HEX}{{4}}-7{_HEX}{{3}}-[89ab]{_HEX}{{3}}-{_HEX}{{12}}", 36
)


def uuid7_key(unix_ms: int | None = None, random_bits: int | None = None) -> str:
    """A new key in ``UUIDV7_KEYS`` (RFC 9562 version 7: 48 bits of Unix milliseconds, then 74 random
    bits), as a client sends it; the standard library has ``uuid.uuid7`` only from Python 3.14 on. Pass
    ``unix_ms`` and ``random_bits`` (any int; its low 74 bits are used) for a key drawn from a seed."""
    ms = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    bits = secrets.randbits(74) if random_bits is None else random_bits & ((1 << 74) - 1)
    value = (
        (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (bits >> 62) << 64 | 0b10 << 62 | (bits & ((1 << 62) - 1))
    )
    return str(uuid.UUID(int=value))
