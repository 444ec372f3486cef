"""Payload fingerprints: a hash of a canonical form of the request, so a reused key with a different
payload is detected (422) instead of replaying an unrelated response."""

from __future__ import annotations

import hashlib
from typing import Any

from storage_adapter.idempotency.records import canonical_json


def payload_fingerprint(payload: Any) -> str:
    """``sha256:<hex>`` over the canonical JSON of ``payload`` (object key order and whitespace do not
    matter), or over the raw bytes when ``payload`` is bytes. Raises TypeError/ValueError for values JSON
    cannot represent exactly (sets, NaN, arbitrary objects): convert them to a canonical form first."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        kind, body = b"bytes:", bytes(payload)
    else:
        kind, body = b"json:", canonical_json(payload)
    return "sha256:" + hashlib.sha256(kind + body).hexdigest()
