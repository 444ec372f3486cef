"""The stored idempotency record: one per (realm, key), as canonical JSON with a schema version.

Decoding is strict: any missing field, wrong type, unparseable or naive timestamp, unknown status or
unknown schema version, an odd attachment descriptor, and anything outside the bounds of
:mod:`storage_adapter.stored_json` (size, depth, int64 integers, finite numbers, duplicate keys, lone
surrogates), raises :class:`CorruptRecordError` naming the object key. Callers never repair or replace
such a record; it stays where it is for inspection. Encoding applies the same bounds, so a record that
decodes can always be written again (a heartbeat never fails on what it read).

Schema 1 is a record without an attachment (byte for byte what was stored before attachments existed);
schema 2 is a record with one, the only difference being its ``attachment`` field: code from before
attachments refuses schema 2 as corrupt (a 500, never a replay without the body), and this code reads both.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from storage_adapter.idempotency.errors import CorruptRecordError
from storage_adapter.stored_json import StoredJSONError, expect, field, items, one_of, timestamp
from storage_adapter.stored_json import dumps as stored_dumps
from storage_adapter.stored_json import loads as stored_loads

SCHEMA_VERSION = 1  # a record without an attachment
ATTACHMENT_SCHEMA_VERSION = 2  # a record with one: schema 1 plus the ``attachment`` field
SCHEMA_VERSIONS = (SCHEMA_VERSION, ATTACHMENT_SCHEMA_VERSION)
# The largest attachment any record may describe, whatever a store's ``max_attachment_bytes`` (which may
# not exceed it): a descriptor claiming more is corrupt. A store reads at most its own ceiling.
ATTACHMENT_SIZE_BOUND = 1 << 32  # 4 GiB
RESERVATION_ID = re.compile("[0-9a-f]{32}")  # uuid4().hex: what IdempotencyStore mints
SHA256_HEX = re.compile("[0-9a-f]{64}")


class RecordStatus(enum.Enum):
    """Lifecycle of a record (see docs/idempotency.md for the state machine)."""

    IN_PROGRESS = "in_progress"  # owned by ``reservation_id`` while its lease is live
    FINALIZED = "finalized"  # terminal outcome stored; duplicates replay it
    # The owner gave up (5xx, 401/403/408/429, NoEffect, or, marked unsettled, an exception, an invalid or
    # unstorable result); the same request may reserve it again, after reconciling an unsettled one.
    CANCELLED = "cancelled"
    PURGING = "purging"  # tombstone written by a purger that alone may delete it


@dataclass(frozen=True)
class Attachment:
    """The outcome body a finalized record keeps as its own object, beside it: ``size`` bytes whose SHA-256
    is ``sha256`` (lowercase hex), written by reservation ``reservation_id`` (32 lowercase hex digits)
    before the finalize CAS that names it. Its object key is derived from the record's slot, the
    reservation id and the digest (``Layout.attachment``); ``IdempotencyStore.attachment`` reads and
    verifies it."""

    reservation_id: str
    size: int
    sha256: str

    @classmethod
    def of(cls, reservation_id: str, data: bytes) -> Attachment:
        """The descriptor of ``data`` written by ``reservation_id``. TypeError unless ``data`` is bytes."""
        if not isinstance(data, bytes):
            raise TypeError(f"an attachment must be bytes, not {type(data).__name__}")
        return cls(reservation_id, len(data), hashlib.sha256(data).hexdigest())


@dataclass(frozen=True)
class IdempotencyRecord:
    """Everything stored about one idempotent request.

    ``reservation_id`` is unique per reservation (a takeover mints a new one): every state change is a
    CAS that first checks it, which fences former owners. ``revision`` grows with every write so no two
    bodies of a key's history are equal (S3 ETags are content hashes; equal bodies would allow ABA).
    ``summary`` is a compact JSON value (a pointer for large results), ``headers`` allow-listed pairs.
    ``attachment`` describes an outcome body kept as its own object (set by finalize only; a purge's
    tombstone keeps it, every other transition clears it): only a FINALIZED record of the reservation
    that wrote it, or a PURGING tombstone, carries one.
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
    attachment: Attachment | None = None

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
    """The stored form of ``record``. Raises StoredJSONError (a ValueError) or TypeError, before anything
    is written, for a record :func:`decode_record` would refuse (a field of the wrong type, such as
    ``http_status="200"``; a naive time; a summary that is not bounded JSON): a key is never poisoned by a
    record its own store cannot read back."""
    fields = dict(vars(record))  # shallow: asdict would deep-copy the summary, recursively
    fields["status"] = record.status.value
    for name in (*_TIMES, "finalized_at"):
        value = getattr(record, name)
        fields[name] = None if value is None else value.isoformat()
    # Tuples become arrays; anything else stays as it is and is refused below (list("ab") is no pair).
    fields["headers"] = [list(pair) if isinstance(pair, tuple) else pair for pair in record.headers]
    attachment = fields.pop("attachment")
    if attachment is not None:
        if not isinstance(attachment, Attachment):
            raise TypeError(f"attachment must be an Attachment, not {type(attachment).__name__}")
        fields["attachment"] = dict(vars(attachment))
    fields["schema"] = SCHEMA_VERSION if attachment is None else ATTACHMENT_SCHEMA_VERSION
    try:
        _values(fields)  # the decoder's own checks: the one definition of a valid record
        return stored_dumps(fields, ensure_ascii=False)
    except StoredJSONError as exc:
        raise StoredJSONError(f"cannot store idempotency record of key {record.key!r}: {exc}") from exc


def decode_record(data: bytes, location: str) -> IdempotencyRecord:
    """Parse a stored record. Raises CorruptRecordError (naming ``location``) for anything malformed."""

    def corrupt(reason: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"corrupt idempotency record {location!r}: {reason} (left in place)", key=location
        )

    try:
        fields = stored_loads(data)
    except StoredJSONError as exc:
        raise corrupt(str(exc)) from exc
    schema = fields.get("schema")
    if type(schema) is not int or schema not in SCHEMA_VERSIONS:
        raise corrupt(f"unsupported schema version {schema!r} (this code reads {SCHEMA_VERSIONS})")
    try:
        return IdempotencyRecord(**_values(fields))
    except StoredJSONError as exc:
        raise corrupt(str(exc)) from exc


def _values(fields: dict[str, Any]) -> dict[str, Any]:
    """The record's constructor arguments from its JSON fields, checked; StoredJSONError otherwise."""
    values: dict[str, Any] = {name: field(fields, name, str) for name in _STRINGS}
    values["status"] = one_of(RecordStatus, field(fields, "status", str), "status")
    values["revision"] = field(fields, "revision", int)
    for name in _TIMES:
        values[name] = timestamp(field(fields, name, str))
    finalized = field(fields, "finalized_at", str, optional=True)
    values["finalized_at"] = None if finalized is None else timestamp(finalized)
    values["http_status"] = field(fields, "http_status", int, optional=True)
    if values["status"] is RecordStatus.FINALIZED and values["http_status"] is None:
        raise StoredJSONError("a finalized record needs an http_status to replay")
    values["error_subtype"] = field(fields, "error_subtype", str, optional=True)
    if "summary" not in fields:
        raise StoredJSONError("field 'summary' missing")
    values["summary"] = fields["summary"]
    values["headers"] = tuple(items(pair, (str, str), "header") for pair in field(fields, "headers", list))
    values["attachment"] = _attachment(fields, values)
    return values


def _attachment(fields: dict[str, Any], values: dict[str, Any]) -> Attachment | None:
    """The record's attachment descriptor, checked; StoredJSONError otherwise. Present exactly in schema 2;
    an object of exactly three fields: a reservation id of the shape IdempotencyStore mints (it names the
    object: nothing else may), a lowercase SHA-256 and a size within ATTACHMENT_SIZE_BOUND; carried only
    by a FINALIZED record of that reservation or by a tombstone."""
    schema = fields.get("schema")
    if "attachment" not in fields:
        if schema == ATTACHMENT_SCHEMA_VERSION:
            raise StoredJSONError(f"field 'attachment' missing (schema {ATTACHMENT_SCHEMA_VERSION})")
        return None
    if schema != ATTACHMENT_SCHEMA_VERSION:
        raise StoredJSONError(f"field 'attachment' needs schema {ATTACHMENT_SCHEMA_VERSION}, got {schema!r}")
    described = expect(fields["attachment"], dict, "field 'attachment'")
    if set(described) != {"reservation_id", "sha256", "size"}:
        raise StoredJSONError(
            f"field 'attachment' must hold exactly reservation_id, sha256 and size, got {sorted(described)}"
        )
    reservation_id = field(described, "reservation_id", str)
    if RESERVATION_ID.fullmatch(reservation_id) is None:
        raise StoredJSONError(
            f"attachment reservation_id {reservation_id[:80]!r} is not 32 lowercase hex digits"
        )
    sha256 = field(described, "sha256", str)
    if SHA256_HEX.fullmatch(sha256) is None:
        raise StoredJSONError(f"attachment sha256 {sha256[:80]!r} is not 64 lowercase hex digits")
    size = field(described, "size", int)
    if not 0 <= size <= ATTACHMENT_SIZE_BOUND:
        raise StoredJSONError(f"attachment size {size} is outside 0..{ATTACHMENT_SIZE_BOUND}")
    status = values["status"]
    if status is RecordStatus.FINALIZED:
        if reservation_id != values["reservation_id"]:
            raise StoredJSONError(
                f"a finalized record of reservation {values['reservation_id']!r} names the attachment of "
                f"reservation {reservation_id!r}"
            )
    elif status is not RecordStatus.PURGING:
        raise StoredJSONError(f"a record {status.value} carries an attachment (only finalize sets one)")
    return Attachment(reservation_id, size, sha256)
