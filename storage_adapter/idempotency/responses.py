"""Transport-agnostic request outcomes: what a handler returns and what the client gets back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Problem types (RFC 9457 ``type`` / Iceberg error subtypes) the idempotency layer itself answers with.
KEY_INVALID = "idempotency_key_invalid"  # 400
KEY_CONFLICT = "idempotency_key_conflict"  # 422
IN_PROGRESS = "idempotency_in_progress"  # 409
REPLAY_FAILED = "idempotency_replay_failed"  # 500
RECONCILE_FAILED = "idempotency_reconcile_failed"  # 500, stored and replayed
STORE_UNAVAILABLE = "idempotency_store_unavailable"  # 503
RECONCILE_ERROR = "idempotency_reconcile_error"  # 500: the reconciler raised; record released, not stored
RECORD_CORRUPT = "idempotency_record_corrupt"  # 500: the stored record cannot be decoded (left in place)
STORE_FAILED = "idempotency_store_failed"  # 500: the store refused or broke (not unavailable); not stored
# Kept on a CANCELLED record whose attempt may have had an effect (a handler exception other than
# NoEffect is one: issue 32): a retry reconciles before running (and without a reconciler it is AMBIGUOUS,
# never run again). Never a response's problem type.
OUTCOME_UNSETTLED = "idempotency_outcome_unsettled"

# 4xx answers that depend on time or credentials rather than on the request: never stored.
NON_DETERMINISTIC_4XX = frozenset({401, 403, 408, 429})


@dataclass(frozen=True)
class HandlerResult:
    """What the wrapped handler produced: a status, a compact JSON ``summary`` (a pointer for large
    results), allow-listed ``headers`` and, for errors, a problem ``error_subtype``. ``attachment``: an
    outcome body of any size up to the store's ``max_attachment_bytes`` (a table's full metadata), stored
    beside the record when the outcome is finalized (``IdempotencyStore.finalize(attachment=...)``); a
    replayer reads it back with ``store.attachment(record)``. It does not count against the summary's
    limit."""

    status: int
    summary: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    error_subtype: str | None = None
    attachment: bytes | None = None


@dataclass(frozen=True)
class Response:
    """The answer for the client. ``replayed`` is True when it was reproduced from a stored outcome and
    the handler did not run for this request."""

    status: int
    summary: Any
    headers: tuple[tuple[str, str], ...]
    replayed: bool
    problem_type: str | None = None


def is_replayable(status: int) -> bool:
    """2xx, 3xx and deterministic 4xx outcomes are final: finalized and replayed (a 3xx answered after
    the effect, a 303 to the created resource, is its answer: never a reason to run again). 5xx never
    are, nor the 4xx that depend on time or credentials."""
    return 200 <= status < 400 or (400 <= status < 500 and status not in NON_DETERMINISTIC_4XX)


def problem(status: int, problem_type: str, detail: str, *, replayed: bool = False) -> Response:
    """An ``application/problem+json``-shaped response from the idempotency layer."""
    body = {"type": problem_type, "status": status, "detail": detail}
    return Response(status, body, (("Content-Type", "application/problem+json"),), replayed, problem_type)
