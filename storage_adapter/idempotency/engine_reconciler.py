"""Reconciliation against the commit engine (``storage_adapter.engine``).

The engine records the idempotency key inside its manifest publish, in the same atomic step as the data,
so ``Engine.find_commit(key)`` answers exactly: a commit carrying the key is durable (APPLIED), and no
such commit means it never became visible (NOT_APPLIED): a crashed commit's unpublished files are
invisible and reclaimed by vacuum. Handlers must pass ``OwnerContext.commit_key`` as the engine's
``idempotency_key`` (it is realm-qualified, see ``handler.commit_key``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from storage_adapter.errors import BackendUnavailableError
from storage_adapter.idempotency.errors import StoreUnavailableError
from storage_adapter.idempotency.handler import commit_key
from storage_adapter.idempotency.reconcile import Reconciliation, Verdict
from storage_adapter.idempotency.records import IdempotencyRecord
from storage_adapter.idempotency.responses import HandlerResult


class CommitFinder(Protocol):
    """The part of the engine reconciliation needs."""

    def find_commit(self, idempotency_key: str) -> Any | None: ...


class EngineReconciler:
    """Reconciler for operations that are one engine commit. ``describe`` turns the engine's commit record
    into the response the original request would have produced (a compact summary, e.g. the version)."""

    def __init__(self, engine: CommitFinder, describe: Callable[[Any], HandlerResult]) -> None:
        self.engine = engine
        self.describe = describe

    def reconcile(self, record: IdempotencyRecord) -> Reconciliation:
        """APPLIED(describe(commit)) or NOT_APPLIED. Raises StoreUnavailableError when the engine's storage
        is unavailable (the handler answers 503; a later retry reconciles again)."""
        try:
            found = self.engine.find_commit(commit_key(record.realm, record.key))
        except BackendUnavailableError as exc:
            raise StoreUnavailableError(
                f"engine unavailable while reconciling {record.key!r}: {exc}"
            ) from exc
        if found is None:
            return Reconciliation(Verdict.NOT_APPLIED)
        return Reconciliation(Verdict.APPLIED, self.describe(found))
