"""JSON encoding of the engine's metadata objects, and their strict decoding.

Every metadata object carries a ``format`` name and a ``format_version``; decoding refuses anything else
with the caller's typed error, naming the key. Bodies are canonical (sorted keys), so equal content is
equal bytes.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from storage_adapter.engine.errors import CorruptMetadataError


def encode(format_name: str, format_version: int, body: dict[str, Any]) -> bytes:
    document = {"format": format_name, "format_version": format_version, **body}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode(raw: bytes, key: str, format_name: str, supported_versions: tuple[int, ...],
           error: type[CorruptMetadataError]) -> dict[str, Any]:  # fmt: skip
    """Parse ``raw`` as a ``format_name`` document of a supported version, else raise ``error``."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{key}: not valid JSON ({exc}); left in place for inspection", key=key) from exc
    if not isinstance(document, dict) or document.get("format") != format_name:
        raise error(f"{key}: not a {format_name} document; left in place for inspection", key=key)
    if document.get("format_version") not in supported_versions:
        raise error(
            f"{key}: unknown {format_name} format_version {document.get('format_version')!r} "
            f"(supported: {list(supported_versions)}); left in place for inspection",
            key=key,
        )
    return document


def require(document: dict[str, Any], field: str, kind: type | tuple[type, ...], key: str,
            error: type[CorruptMetadataError]) -> Any:  # fmt: skip
    """``document[field]`` if present and of ``kind``, else raise ``error`` naming the key and field."""
    value = document.get(field)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise error(f"{key}: field {field!r} missing or not {kind}; left in place for inspection", key=key)
    return value


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)
