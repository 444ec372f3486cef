"""The stored idempotency record: one per (realm, key), as canonical JSON with a schema version.

Decoding is strict: any missing field, wrong type, unknown status or unknown schema version raises
:class:`CorruptRecordError` naming the object key. Callers never repair or replace such a record; it stays
where it is for inspection.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from storage_adapter.idempotency.errors import CorruptRecordError

SCHEMA_VERSION = 1


class RecordStatus(enum.Enum):
    """Lifecycle of a record (see docs/idempotency.md for the state machine)."""

    IN_PROGRESS = "in_progress"  # owned by ``reservation_id`` while its lease is live
    FINALIZED = "finalized"  # terminal outcome stored; duplicates replay it
    CANCELLED = "cancelled"  # the owner gave up (5xx, 401/403/408/429, unstorable response); reusable
    PURGING = "purging"  # tombstone written by a purger that alone may delete it


@dataclass(frozen=True)
class IdempotencyRecord:
    """Everything stored about one idempotent request.

    ``reservation_id`` is unique per reservation (a takeover mints a new one): every state change is a
    CAS that first checks it, which fences former owners. ``revision`` grows with every write so no two
    bodies of a key's history are equal (S3 ETags are content hashes; equal bodies would allow ABA).
    ``summary`` is a compact JSON value (a pointer for large results), ``headers`` allow-listed pairs.
    """

    realm: str
    key: str
    operation: str
    resource: str
    fingerprint: str
    status: RecordStatus
    reservation_id: str
    executor_id: str
    revision: int
    created_at: datetime
    heartbeat_at: datetime
    lease_expires_at: datetime
    expires_at: datetime
    finalized_at: datetime | None = None
    http_status: int | None = None
    error_subtype: str | None = None
    summary: Any = None
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def binding(self) -> tuple[str, str, str]:
        """What a key is bound to besides its realm: a duplicate must match it, or it is a 422 conflict."""
        return (self.operation, self.resource, self.fingerprint)

    def next(self, **changes: Any) -> IdempotencyRecord:
        """This record with ``changes`` applied and the revision advanced by one."""
        return replace(self, revision=self.revision + 1, **changes)


_TIMES = ("created_at", "heartbeat_at", "lease_expires_at", "expires_at")
_STRINGS = ("realm", "key", "operation", "resource", "fingerprint", "reservation_id", "executor_id")


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8, no NaN/Infinity (raises ValueError)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def encode_record(record: IdempotencyRecord) -> bytes:
    fields = asdict(record)
    fields["status"] = record.status.value
    for name in (*_TIMES, "finalized_at"):
        value = getattr(record, name)
        fields[name] = None if value is None else value.isoformat()
    fields["headers"] = [list(pair) for pair in record.headers]
    fields["schema"] = SCHEMA_VERSION
    return canonical_json(fields)


def decode_record(data: bytes, location: str) -> IdempotencyRecord:
    """Parse a stored record. Raises CorruptRecordError (naming ``location``) for anything malformed."""

    def corrupt(reason: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"corrupt idempotency record {location!r}: {reason} (left in place)", key=location
        )

    try:
        fields = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt(f"not JSON ({exc})") from exc
    if not isinstance(fields, dict):
        raise corrupt("not a JSON object")
    if fields.get("schema") != SCHEMA_VERSION:
        raise corrupt(
            f"unsupported schema version {fields.get('schema')!r} (this code reads {SCHEMA_VERSION})"
        )
    try:
        values: dict[str, Any] = {name: _typed(fields, name, str) for name in _STRINGS}
        values["status"] = RecordStatus(fields["status"])
        values["revision"] = _typed(fields, "revision", int)
        for name in _TIMES:
            values[name] = _time(_typed(fields, name, str))
        finalized = _optional(fields, "finalized_at", str)
        values["finalized_at"] = None if finalized is None else _time(finalized)
        values["http_status"] = _optional(fields, "http_status", int)
        values["error_subtype"] = _optional(fields, "error_subtype", str)
        values["summary"] = fields["summary"]
        headers = _typed(fields, "headers", list)
        if not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in headers
        ):
            raise ValueError("headers must be [name, value] string pairs")
        values["headers"] = tuple((name, value) for name, value in headers)
    except (KeyError, ValueError, TypeError) as exc:
        raise corrupt(str(exc) or type(exc).__name__) from exc
    return IdempotencyRecord(**values)


def _typed(fields: dict[str, Any], name: str, kind: type) -> Any:
    value = fields[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _optional(fields: dict[str, Any], name: str, kind: type) -> Any:
    return None if fields[name] is None else _typed(fields, name, kind)


def _time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no time zone")
    return moment
