"""Reconciliation against the commit engine (``storage_adapter.engine``).

The engine records the idempotency key inside its manifest publish, in the same atomic step as the data,
so ``Engine.find_commit(key)`` answers exactly which commits are visible. A commit whose writer died
mid-protocol leaves a recovery sidecar that the engine's ``heal`` rolls forward or back, so the
reconciler heals first: after that, a commit carrying the key is durable (APPLIED) and none means it
never became visible (NOT_APPLIED). A writer that is still alive (a slow former owner) is left alone by
heal; it cannot double the effect either, because ``Engine.commit`` returns the already-landed commit for
a key instead of publishing again (it checks on every publish attempt). Handlers must pass
``OwnerContext.commit_key`` as the engine's ``idempotency_key`` (it is realm-qualified).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from storage_adapter.idempotency.handler import commit_key
from storage_adapter.idempotency.reconcile import ReconcileVerdict, Reconciliation
from storage_adapter.idempotency.records import IdempotencyRecord
from storage_adapter.idempotency.responses import HandlerResult


class CommitFinder(Protocol):
    """The part of the engine reconciliation needs (``settings.key_window_s``: how long it answers
    ``find_commit`` exactly)."""

    @property
    def settings(self) -> Any: ...

    def heal(self) -> Any: ...

    def find_commit(self, idempotency_key: str) -> Any | None: ...


class EngineReconciler:
    """Reconciler for operations that are one engine commit. ``describe`` turns the engine's commit record
    into the response the original request would have produced (a compact summary, e.g. the version)."""

    def __init__(self, engine: CommitFinder, describe: Callable[[Any], HandlerResult]) -> None:
        self.engine = engine
        self.describe = describe

    def reconcile(self, record: IdempotencyRecord) -> Reconciliation:
        """APPLIED(describe(commit)) or NOT_APPLIED; AMBIGUOUS for a record older than the engine's key
        window (its ledger entry may be gone: "not found" would not mean "not applied"). Raises
        BackendUnavailableError when the engine's storage is unavailable (the handler answers 503; a later
        retry reconciles again)."""
        age = datetime.now(UTC) - record.created_at
        if age > timedelta(seconds=self.engine.settings.key_window_s):
            return Reconciliation(
                ReconcileVerdict.AMBIGUOUS,
                reason=f"the request is {age} old, past the engine's key window "
                f"({self.engine.settings.key_window_s:g} s): whether it applied cannot be proven",
            )
        self.engine.heal()
        found = self.engine.find_commit(commit_key(record))
        if found is None:
            return Reconciliation(ReconcileVerdict.NOT_APPLIED)
        return Reconciliation(ReconcileVerdict.APPLIED, self.describe(found))
