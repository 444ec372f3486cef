"""Typed errors of the idempotency store. All are :class:`~storage_adapter.errors.StorageError` subclasses
so callers that already handle the adapter's errors see these too; each names the record's key."""

from __future__ import annotations

from storage_adapter.errors import StorageError


class InvalidIdempotencyKeyError(StorageError, ValueError):
    """The Idempotency-Key is missing or does not match the configured key format (HTTP 400)."""


class CorruptRecordError(StorageError):
    """A stored record cannot be decoded or does not belong where it is stored. The record is left in
    place for inspection: nothing ever overwrites or deletes a record it cannot read."""


class SummaryTooLargeError(StorageError, ValueError):
    """The response summary plus headers exceed the store's limit. Raised before anything is written."""


class AttachmentTooLargeError(SummaryTooLargeError):
    """An outcome's attachment is over the store's ``max_attachment_bytes``. Raised before any request."""


class StoreUnavailableError(StorageError):
    """The idempotency store did not answer within its per-call deadline, or the backend is unavailable
    (HTTP 503 ``idempotency_store_unavailable``). The outcome of a mutation that raised this is unknown."""


class ReplayUnavailableError(StorageError):
    """A finalized outcome can no longer be reproduced (for example its resource was dropped and purged).
    Raised by replayers; the handler answers 5xx ``idempotency_replay_failed`` and never re-runs."""
