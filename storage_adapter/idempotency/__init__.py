"""Idempotency-Key semantics on object storage: a store of fenced reservations, a transport-agnostic
request wrapper, and reconciliation of stalled owners against the commit engine. See docs/idempotency.md."""

from storage_adapter.idempotency.errors import (
    AttachmentTooLargeError,
    CorruptRecordError,
    InvalidIdempotencyKeyError,
    ReplayUnavailableError,
    StoreUnavailableError,
    SummaryTooLargeError,
)
from storage_adapter.idempotency.fingerprint import payload_fingerprint
from storage_adapter.idempotency.handler import (
    Backoff,
    IdempotentRequest,
    NoEffect,
    OwnerContext,
    Ownership,
    Policy,
    claim_once,
    commit_key,
    in_progress,
    replay,
    run_idempotent,
    store_failure,
)
from storage_adapter.idempotency.keyformat import UUID_KEYS, UUIDV7_KEYS, KeyFormat, uuid7_key
from storage_adapter.idempotency.reconcile import ByOperation, Reconciler, ReconcileVerdict, Reconciliation
from storage_adapter.idempotency.records import Attachment, IdempotencyRecord, RecordStatus
from storage_adapter.idempotency.responses import HandlerResult, Response, is_replayable
from storage_adapter.idempotency.store import (
    Cancelled,
    Duplicate,
    Finalized,
    IdempotencyStore,
    LostOwnership,
    NotFound,
    Owned,
    Stored,
    Updated,
)

__all__ = [
    "UUIDV7_KEYS",
    "UUID_KEYS",
    "Attachment",
    "AttachmentTooLargeError",
    "Backoff",
    "ByOperation",
    "Cancelled",
    "CorruptRecordError",
    "Duplicate",
    "Finalized",
    "HandlerResult",
    "IdempotencyRecord",
    "IdempotencyStore",
    "IdempotentRequest",
    "InvalidIdempotencyKeyError",
    "KeyFormat",
    "LostOwnership",
    "NoEffect",
    "NotFound",
    "Owned",
    "OwnerContext",
    "Ownership",
    "Policy",
    "ReconcileVerdict",
    "Reconciler",
    "Reconciliation",
    "RecordStatus",
    "ReplayUnavailableError",
    "Response",
    "StoreUnavailableError",
    "Stored",
    "SummaryTooLargeError",
    "Updated",
    "claim_once",
    "commit_key",
    "in_progress",
    "is_replayable",
    "payload_fingerprint",
    "replay",
    "run_idempotent",
    "store_failure",
    "uuid7_key",
]
