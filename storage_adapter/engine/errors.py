"""Typed errors of the commit engine. Every one is a :class:`~storage_adapter.errors.StorageError`.

Each names the object key (relative to the engine's root) or table it concerns. Nothing is published
when one of the "before publish" errors (schema, unknown table, corrupt manifest, conflict) is raised.
"""

from __future__ import annotations

from storage_adapter.errors import StorageError


class EngineError(StorageError):
    """Root of the engine's own errors."""


class CommitConflictError(EngineError):
    """The commit cannot be applied on the current state: ``expected_version`` does not match the
    manifest, or an overwrite raced another commit to the same table. Nothing of it is visible.

    ``expected`` and ``actual`` are the versions compared (manifest versions for ``expected_version``,
    table versions for a table conflict); ``table`` names the table, or is None for the manifest.
    """

    def __init__(
        self,
        message: str,
        *,
        expected: int | None,
        actual: int | None,
        table: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message, key=key)
        self.expected = expected
        self.actual = actual
        self.table = table


class CommitRetriesExhaustedError(CommitConflictError):
    """Non-conflicting appends kept losing the manifest race beyond the retry budget. Nothing is visible."""


class CommitFencedError(EngineError):
    """A healer judged this commit's writer dead (its sidecar lease lapsed) and rolled the commit back or
    discarded it, recording that decision in the manifest (a fence record): the writer must not publish
    it afterwards, and did not. Nothing of this commit is visible and its idempotency key is not held by
    it: retry (with the same key, it applies once)."""


class KeyInFlightError(EngineError):
    """Another commit holds the idempotency key and its writer is still working: nothing of this commit is
    visible. Retry later; the retry replays that commit if it lands, or commits if it never does."""


class KeyWindowExpiredError(EngineError, ValueError):
    """The idempotency key was issued longer ago than the engine keeps keys (``key_window_s``): whether it
    already applied can no longer be proven, so the commit is refused before any I/O."""


class UnknownTableError(EngineError, KeyError):
    """The table is not in the manifest (never created, or not in the snapshot read)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TableExistsError(EngineError):
    """``create_table`` named a table that already exists."""


class SchemaMismatchError(EngineError, ValueError):
    """Data does not have the table's schema. Raised before anything is written or published."""


class CorruptMetadataError(EngineError):
    """A metadata object (manifest, table version, sidecar, audit record) is not valid. It is refused and
    left in place for inspection; nothing is overwritten."""


class CorruptManifestError(CorruptMetadataError):
    """The manifest cannot be parsed or fails validation."""


class CorruptSidecarError(CorruptMetadataError):
    """A recovery sidecar is truncated, not JSON, or of an unknown schema version. Heal and read-write open
    refuse to proceed past it; read-only opens still work."""


class RecoveryInvariantError(EngineError):
    """A pending sidecar shows a state the protocol can never produce (the manifest behind the sidecar's
    expected pin, or a pinned table version missing). Recovery aborts loudly; the sidecar is kept."""


class ReadOnlyEngineError(EngineError):
    """A write was attempted on an engine opened with ``read_only=True``."""


class StaleFragmentError(EngineError):
    """A fragment is too old to commit: vacuum may already have reclaimed it (see the grace rule)."""


class HistoryExpiredError(EngineError):
    """The requested manifest version is older than the retained history window."""
