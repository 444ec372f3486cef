"""run_idempotent: Idempotency-Key semantics around any handler, independent of the transport.

The status-code table and the state machine are in docs/idempotency.md. In short: 400 bad key, 422 key
reused for a different request, replay of stored outcomes, bounded wait then 409 while another owner
works, reconciliation of stale owners, 503 when the store cannot answer, and only 2xx/deterministic 4xx
stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from storage_adapter.errors import BackendUnavailableError, StorageError
from storage_adapter.idempotency.deadline import translate_unavailable
from storage_adapter.idempotency.errors import (
    CorruptRecordError,
    InvalidIdempotencyKeyError,
    ReplayUnavailableError,
    StoreUnavailableError,
)
from storage_adapter.idempotency.fingerprint import payload_fingerprint
from storage_adapter.idempotency.lease_keeper import LeaseKeeper
from storage_adapter.idempotency.reconcile import Reconciler, ReconcileVerdict, Reconciliation
from storage_adapter.idempotency.records import IdempotencyRecord, RecordStatus, encode_record
from storage_adapter.idempotency.responses import (
    IN_PROGRESS,
    KEY_CONFLICT,
    KEY_INVALID,
    OUTCOME_UNSETTLED,
    RECONCILE_ERROR,
    RECONCILE_FAILED,
    RECORD_CORRUPT,
    REPLAY_FAILED,
    STORE_FAILED,
    STORE_UNAVAILABLE,
    HandlerResult,
    Response,
    is_replayable,
    problem,
)
from storage_adapter.idempotency.store import Finalized, IdempotencyStore, Owned

Replayer = Callable[[IdempotencyRecord], HandlerResult]


@dataclass(frozen=True)
class IdempotentRequest:
    """One request: ``realm`` is the tenant/principal the key is bound to; ``payload`` is fingerprinted
    (canonical JSON or bytes) so a reused key with another payload is refused."""

    realm: str
    key: str | None
    operation: str
    resource: str
    payload: Any


@dataclass(frozen=True)
class Policy:
    """Waiting and retry bounds. A duplicate of an in-flight request polls after ``first_wait_s``,
    doubling up to ``max_wait_s``, and gives up with 409 once the next sleep would pass ``total_wait_s``.
    Finalize and cancel are tried ``settle_attempts`` times (each under the store's per-call deadline).
    ``heartbeat_s`` defaults to a third of the lease. ``lease_margin_s`` (default: a quarter of the lease)
    is how long before its lease runs out an owner whose heartbeats fail counts it as lost."""

    first_wait_s: float = 0.2
    max_wait_s: float = 2.0
    total_wait_s: float = 30.0
    settle_attempts: int = 3
    heartbeat_s: float | None = None
    lease_margin_s: float | None = None


@dataclass(frozen=True)
class OwnerContext:
    """Given to the handler while it owns the key. ``commit_key`` is realm-qualified: pass it to the engine
    so the effect is recorded with the key. Check ``lost`` right before an irreversible step: it is True
    once ownership can no longer be proven (taken over, a heartbeat refused, or no heartbeat has succeeded
    for the lease minus the policy's margin), and stays True."""

    request: IdempotentRequest
    keeper: LeaseKeeper

    @property
    def commit_key(self) -> str:
        return commit_key(self.keeper.owned.record)

    @property
    def key_issued_at(self) -> datetime:
        """When the request's key was first reserved: pass it to the engine as ``key_issued_at`` so it
        refuses a key whose window may be gone instead of applying it again."""
        return self.keeper.owned.record.created_at

    @property
    def lost(self) -> bool:
        return self.keeper.lost


Handler = Callable[[OwnerContext], HandlerResult]


class NoEffect(Exception):
    """Raised by a handler to say it stopped before any effect: the one documented "nothing happened".

    Any other exception out of a handler may follow its effect (a connection reset after the write), so
    the attempt is AMBIGUOUS until a reconciler answers; after ``NoEffect`` the reservation is cancelled
    plainly and a retry runs the request again. Chain the cause: ``raise NoEffect("...") from exc``."""


def commit_key(record: IdempotencyRecord) -> str:
    """The key an engine records with the effect of ``record``'s request: bound to the realm, so realms
    never match each other's, and to the reservation's creation time, which every retry, takeover and
    re-reservation of a cancelled attempt keeps, while a key reused after its record was purged gets a
    new one: a new request is never answered by an old request's effect."""
    created = record.created_at.astimezone(UTC).isoformat(timespec="microseconds")
    return f"{record.realm}/{record.key}@{created}"


def run_idempotent(
    store: IdempotencyStore,
    request: IdempotentRequest,
    handler: Handler,
    *,
    reconciler: Reconciler | None = None,
    replayer: Replayer | None = None,
    policy: Policy = Policy(),
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Response:
    """Run ``handler`` at most once per (realm, key) and answer every duplicate with the same outcome.

    ``reconciler`` answers for stalled owners (without one, a stale owner is AMBIGUOUS). ``replayer``
    rebuilds a response from a stored record (default: the stored summary as is); it raises
    ReplayUnavailableError when that is impossible. If ``handler`` raises, the reservation is cancelled
    and the exception propagates. So it is when ``handler`` returns a result the store could not keep
    (not a HandlerResult: TypeError; a non-int status, headers that are not (str, str) pairs, a
    non-str error subtype, a summary that is not bounded JSON: ValueError); the record is never left
    in progress. Such an attempt may have had its effect, so the record is cancelled as unsettled: a
    retry asks the reconciler and, without one, answers the terminal AMBIGUOUS outcome (500
    ``idempotency_reconcile_failed``), never running the handler again; only a handler that raises
    :class:`NoEffect` (it stopped before any effect) leaves the key to a plain re-run. Every other failure (of the store, of the reconciler) is a response from the outcomes
    table in docs/idempotency.md, and a record this call owned is released first, never left in progress.

    A duplicate in progress waits through ``sleep`` and measures ``policy.total_wait_s`` on ``clock``
    (seconds, monotonic); a test passes a clock its ``sleep`` advances, so the wait is the same however
    slow the machine is.
    """
    try:
        key = store.key_format.validate(request.key)
    except InvalidIdempotencyKeyError as exc:
        return problem(400, KEY_INVALID, str(exc))
    try:
        claim = _claim(store, request, key, policy, sleep, clock)
    except Exception as exc:
        if not isinstance(exc, StorageError):
            raise  # invalid arguments (TypeError/ValueError before any request)
        return _failure(exc, STORE_FAILED)
    if isinstance(claim, Response):
        return claim
    if isinstance(claim, IdempotencyRecord):
        return _replay(claim, replayer)
    return _as_owner(store, claim, request, handler, reconciler, replayer, policy)


def _claim(
    store: IdempotencyStore,
    request: IdempotentRequest,
    key: str,
    policy: Policy,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> Owned | IdempotencyRecord | Response:
    """Own the key (reserve, or take a stale lease over), or the finalized record to replay, or the
    answer (422, 409) when neither is possible. Raises the store's errors."""
    fingerprint = payload_fingerprint(request.payload)
    binding = (request.operation, request.resource, fingerprint)
    give_up_at = clock() + policy.total_wait_s
    delay = policy.first_wait_s
    while True:
        claim = store.reserve(
            request.realm,
            key,
            operation=request.operation,
            resource=request.resource,
            fingerprint=fingerprint,
        )
        if isinstance(claim, Owned):
            return claim
        record = claim.record
        if record.binding != binding:
            detail = f"key {key!r} is bound to another request ({record.operation} on {record.resource})"
            return problem(422, KEY_CONFLICT, detail)
        if record.status is RecordStatus.FINALIZED:
            return record
        if store.is_lease_stale(record):
            successor = store.takeover(claim)
            if successor is not None:
                return successor
            continue  # someone else changed it first: look again without waiting
        if clock() + delay > give_up_at:
            return problem(409, IN_PROGRESS, f"key {key!r} is being processed; retry later")
        sleep(delay)
        delay = min(delay * 2, policy.max_wait_s)


def _as_owner(
    store: IdempotencyStore,
    owned: Owned,
    request: IdempotentRequest,
    handler: Handler,
    reconciler: Reconciler | None,
    replayer: Replayer | None,
    policy: Policy,
) -> Response:
    """Everything an owner does, under its lease (heartbeats run from the reservation on, reconciliation
    included). After asking a reconciler, which can take long, ownership is proven again by a fenced
    heartbeat CAS before the handler runs; a handler never runs for a record this call no longer owns."""
    interval = policy.heartbeat_s if policy.heartbeat_s is not None else store.lease.total_seconds() / 3
    with LeaseKeeper(store, owned, interval, policy.lease_margin_s) as keeper:
        if owned.previous is not None:
            # A former attempt may have had its effect: ask the engine before running again.
            try:
                answer = _reconcile(owned.previous, reconciler)
            except BaseException as exc:
                return _release(store, keeper, policy, exc, RECONCILE_ERROR)
            if answer is not None:
                outcome = answer.outcome
                if outcome is None:
                    outcome = HandlerResult(500, {"reason": answer.reason}, error_subtype=RECONCILE_FAILED)
                keeper.stop()
                settled = _settle(store, keeper.owned, outcome, policy)
                record = settled if settled is not None else _record_of(keeper.owned, outcome)
                return _replay(record, replayer)
            if reconciler is not None:
                try:
                    owns = keeper.confirm()
                except BaseException as exc:
                    return _release(store, keeper, policy, exc, STORE_FAILED)
                if not owns:
                    if keeper.loss is None and keeper.error is not None:
                        return _release(store, keeper, policy, keeper.error, STORE_FAILED)
                    return _overtaken(keeper, replayer)
        try:
            result = _checked(handler(OwnerContext(request, keeper)), keeper.owned)
        except BaseException as exc:
            keeper.stop()
            _abandon(store, keeper.owned, exc, policy)
            raise
        keeper.stop()
    if keeper.loss is not None:
        pass  # the store already said another party holds the record: finalize/cancel would be fenced
    elif is_replayable(result.status):
        _settle(store, keeper.owned, result, policy)
    else:
        _best_effort(lambda: store.cancel(keeper.owned), policy)
    return Response(result.status, result.summary, result.headers, False, result.error_subtype)


def _abandon(store: IdempotencyStore, owned: Owned, exc: BaseException, policy: Policy) -> None:
    """Cancel the reservation of a handler that raised ``exc``. An exception is not proof that nothing
    happened (the effect may have landed before a connection reset): the record is marked unsettled, so
    a retry reconciles (AMBIGUOUS without a reconciler), unless the handler said so with NoEffect."""
    subtype = None if isinstance(exc, NoEffect) else OUTCOME_UNSETTLED
    _best_effort(lambda: store.cancel(owned, error_subtype=subtype), policy)


def _overtaken(keeper: LeaseKeeper, replayer: Replayer | None) -> Response:
    """The answer of an owner that lost its record before running the handler: the successor's stored
    outcome if it finalized one, else 409 (the successor is still at work, or gave the key up)."""
    record = getattr(keeper.loss, "record", None)
    if record is not None and record.status is RecordStatus.FINALIZED:
        return _replay(record, replayer)
    key = keeper.owned.record.key
    return problem(409, IN_PROGRESS, f"key {key!r} was taken over by another attempt; retry later")


def _release(
    store: IdempotencyStore, keeper: LeaseKeeper, policy: Policy, exc: BaseException, subtype: str
) -> Response:
    """A failure while owning, before the handler ran: give the reservation up (CANCELLED, marked as an
    attempt whose effect is unsettled, so the next retry takes it at once and reconciles again) and
    answer with the failure's outcome. Not an Exception (KeyboardInterrupt...): released, re-raised."""
    keeper.stop()
    _best_effort(lambda: store.cancel(keeper.owned, error_subtype=OUTCOME_UNSETTLED), policy)
    if not isinstance(exc, Exception):
        raise exc
    return _failure(exc, subtype)


def _failure(exc: Exception, subtype: str) -> Response:
    """The defined outcome of a failure: 503 when the store or engine is unavailable (or slow past its
    deadline), 500 ``idempotency_record_corrupt`` for a record that cannot be decoded (left in place),
    else 500 ``subtype`` (``idempotency_store_failed`` / ``idempotency_reconcile_error``). Never stored."""
    if isinstance(exc, (StoreUnavailableError, BackendUnavailableError)):
        return problem(503, STORE_UNAVAILABLE, str(exc))
    if isinstance(exc, CorruptRecordError):
        return problem(500, RECORD_CORRUPT, str(exc))
    return problem(500, subtype, f"{type(exc).__name__}: {exc}")


def _checked(result: object, owned: Owned) -> HandlerResult:
    """``result`` if it is a HandlerResult the store could finalize (whether or not its status is stored:
    one rule for every result), else TypeError/ValueError saying the handler returned it."""
    if not isinstance(result, HandlerResult):
        raise TypeError(f"handler returned {type(result).__name__}, not a HandlerResult")
    try:
        encode_record(_record_of(owned, result))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"handler returned a result the idempotency store cannot keep: {exc}") from exc
    return result


def _reconcile(previous: IdempotencyRecord, reconciler: Reconciler | None) -> Reconciliation | None:
    """None when the request should run; otherwise the Reconciliation to finalize (APPLIED/AMBIGUOUS)."""
    if reconciler is None:
        if previous.status is RecordStatus.CANCELLED and previous.error_subtype != OUTCOME_UNSETTLED:
            return None  # without an engine to ask, a cancelled attempt is taken at its word: no effect
        return Reconciliation(ReconcileVerdict.AMBIGUOUS, reason="no reconciler configured for a stale owner")
    # The Reconciler protocol lets any reconciler raise BackendUnavailableError: a 503, like the store's.
    answer = translate_unavailable(lambda: reconciler.reconcile(previous), f"reconcile {previous.key!r}")
    return None if answer.verdict is ReconcileVerdict.NOT_APPLIED else answer


def _settle(
    store: IdempotencyStore, owned: Owned, result: HandlerResult, policy: Policy
) -> IdempotencyRecord | None:
    """Finalize ``result`` (an effect that happened, or a reconciled verdict). Returns the finalized record
    when this call stored it, else None, and never raises: the caller answers with ``result`` either way.

    Unavailable: retried ``settle_attempts`` times, then left IN_PROGRESS (the lease lapses and a later
    retry reconciles). Any other failure (a summary too large to store, PermissionDeniedError, a broken
    backend, a corrupt record): not retried; the reservation is cancelled as unsettled when the store
    lets it, so the next retry reconciles at once (else the lease lapses first)."""
    outcome: Any = None
    for _ in range(policy.settle_attempts):
        try:
            outcome = store.finalize(
                owned,
                http_status=result.status,
                summary=result.summary,
                headers=result.headers,
                error_subtype=result.error_subtype,
            )
            break
        except StoreUnavailableError:
            continue
        except Exception:
            _best_effort(lambda: store.cancel(owned, error_subtype=OUTCOME_UNSETTLED), policy)
            return None
    return outcome.record if isinstance(outcome, Finalized) else None


def _best_effort(call: Callable[[], Any], policy: Policy) -> Any:
    """Try ``call`` up to ``settle_attempts`` times while the store is unavailable; None if it never
    answered (the lease then goes stale and a later duplicate reconciles) or failed otherwise (not
    retried: a refusal or a broken backend does not heal in a moment). Never raises an Exception."""
    for _ in range(policy.settle_attempts):
        try:
            return call()
        except StoreUnavailableError:
            continue
        except Exception:
            return None
    return None


def _record_of(owned: Owned, result: HandlerResult) -> IdempotencyRecord:
    return owned.record.next(
        status=RecordStatus.FINALIZED,
        http_status=result.status,
        summary=result.summary,
        headers=result.headers,
        error_subtype=result.error_subtype,
    )


def _replay(record: IdempotencyRecord, replayer: Replayer | None) -> Response:
    if record.error_subtype == RECONCILE_FAILED:
        return problem(
            500, RECONCILE_FAILED, f"the outcome of key {record.key!r} could not be reconciled", replayed=True
        )
    if record.http_status is None:
        raise ValueError(f"record {record.key!r} is {record.status.value}, not finalized: nothing to replay")
    try:
        result = (
            replayer(record)
            if replayer is not None
            else HandlerResult(record.http_status, record.summary, record.headers, record.error_subtype)
        )
    except ReplayUnavailableError as exc:
        return problem(
            500, REPLAY_FAILED, f"stored outcome of key {record.key!r} cannot be reproduced: {exc}"
        )
    return Response(result.status, result.summary, result.headers, True, result.error_subtype)
