"""Idempotency-Key formats: what a client may send as a key. UUIDs by default (the Iceberg REST spec asks
for UUIDv7 strings); any other format is a regular expression plus a length bound."""

from __future__ import annotations

import re
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
