"""JSON encoding of the engine's metadata objects, and their strict decoding.

Every metadata object carries a ``format`` name and a ``format_version``; decoding refuses anything else
with the caller's typed error, naming the key. Parsing is bounded by :mod:`storage_adapter.stored_json`
(size, depth, int64 integers, finite numbers, no duplicate keys), and so is encoding: nothing is written
that could not be read back. Bodies are canonical (sorted keys), so equal content is equal bytes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from storage_adapter import stored_json
from storage_adapter.engine.errors import CorruptMetadataError
from storage_adapter.types import ObjectInfo


def encode(format_name: str, format_version: int, body: dict[str, Any]) -> bytes:
    """The canonical document. Raises StoredJSONError (a ValueError) for a body out of stored_json's
    bounds, before anything is written."""
    return stored_json.dumps({"format": format_name, "format_version": format_version, **body})


def decode(
    raw: bytes,
    key: str,
    format_name: str,
    supported_versions: tuple[int, ...],
    error: type[CorruptMetadataError],
) -> dict[str, Any]:
    """Parse ``raw`` as a ``format_name`` document of a supported version, else raise ``error``."""
    document = stored_json.decode(raw, key, error)
    if document.get("format") != format_name:
        raise error(f"{key}: not a {format_name} document; left in place for inspection", key=key)
    version = document.get("format_version")
    if type(version) is not int or version not in supported_versions:  # true == 1, but is no version
        raise error(
            f"{key}: unknown {format_name} format_version {version!r} "
            f"(supported: {list(supported_versions)}); left in place for inspection",
            key=key,
        )
    return document


def malformed(key: str, error: type[CorruptMetadataError], reason: Exception) -> CorruptMetadataError:
    """``error`` for a parsed document whose content is wrong (a field's type, a date), naming the key
    and the reason. Decoders read fields with stored_json.field/items/timestamp and convert their
    StoredJSONError with this."""
    return error(f"{key}: malformed ({reason}); left in place for inspection", key=key)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


def age_cutoff(seconds: float) -> datetime:
    """The moment ``seconds`` ago, on this host's clock."""
    return datetime.now(UTC) - timedelta(seconds=seconds)


def written_before(info: ObjectInfo, cutoff: datetime) -> bool:
    """Whether the store last wrote the listed object before ``cutoff`` (a naive time counts as UTC)."""
    modified = info.last_modified
    if modified.tzinfo is None:
        modified = modified.replace(tzinfo=UTC)
    return modified < cutoff
