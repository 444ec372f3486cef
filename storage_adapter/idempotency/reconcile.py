"""Reconciliation: asking the system of record whether a stalled request's effect happened.

When an owner's lease goes stale (it crashed or stalled) or a cancelled attempt is retried, the record
alone cannot tell whether the mutation landed. A Reconciler, keyed by the record's operation and
resource, answers from the engine's own state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from storage_adapter.idempotency.records import IdempotencyRecord
from storage_adapter.idempotency.responses import HandlerResult


class ReconcileVerdict(enum.Enum):
    APPLIED = "applied"  # the effect is durable: finalize from ``outcome`` and replay it
    NOT_APPLIED = "not_applied"  # provably no effect: the new owner runs the request
    AMBIGUOUS = "ambiguous"  # cannot tell: finalize the terminal ``idempotency_reconcile_failed``


@dataclass(frozen=True)
class Reconciliation:
    verdict: ReconcileVerdict
    outcome: HandlerResult | None = None  # set exactly when APPLIED
    reason: str = ""

    def __post_init__(self) -> None:
        if (self.verdict is ReconcileVerdict.APPLIED) != (self.outcome is not None):
            raise ValueError("an APPLIED reconciliation carries the outcome; the others carry none")


class Reconciler(Protocol):
    """Answers for one stalled record (its ``realm``, ``key``, ``operation`` and ``resource``).

    Must be exact for APPLIED and NOT_APPLIED: NOT_APPLIED lets the request run again. Raise
    StoreUnavailableError (or the engine's BackendUnavailableError) when the engine cannot be asked.
    """

    def reconcile(self, record: IdempotencyRecord) -> Reconciliation: ...


class ByOperation:
    """Dispatches to one Reconciler per operation type; an operation without one is AMBIGUOUS (never
    guessed as not applied)."""

    def __init__(self, reconcilers: dict[str, Reconciler]) -> None:
        self.reconcilers = dict(reconcilers)

    def reconcile(self, record: IdempotencyRecord) -> Reconciliation:
        reconciler = self.reconcilers.get(record.operation)
        if reconciler is None:
            return Reconciliation(
                ReconcileVerdict.AMBIGUOUS, reason=f"no reconciler for operation {record.operation!r}"
            )
        return reconciler.reconcile(record)
