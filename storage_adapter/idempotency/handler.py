"""run_idempotent: Idempotency-Key semantics around any handler, independent of the transport.

The status-code table and the state machine are in docs/idempotency.md. In short: 400 bad key, 422 key
reused for a different request, replay of stored outcomes, bounded wait then 409 while another owner
works, reconciliation of stale owners, 503 when the store cannot answer, and only 2xx, 3xx and deterministic 4xx
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
from storage_adapter.idempotency.records import Attachment, IdempotencyRecord, RecordStatus, encode_record
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
        return store_failure(exc)
    if isinstance(claim, Response):
        return claim
    if isinstance(claim, IdempotencyRecord):
        return replay(claim, replayer)
    ownership = Ownership(store, claim, request, reconciler, replayer, policy)
    answer = ownership.start()
    if answer is not None:
        return answer
    try:
        result = handler(ownership.context)
    except BaseException as exc:
        ownership.abandon(exc)
        raise
    return ownership.finish(result)


class Backoff:
    """The waits of a duplicate while another owner works: ``policy.first_wait_s``, doubling up to
    ``max_wait_s``; ``next()`` is None once the next wait would pass ``total_wait_s`` from the creation
    of this object, measured on ``clock`` (seconds, monotonic). The sleeping is the caller's: a thread
    sleeps, a coroutine awaits."""

    def __init__(self, policy: Policy, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.give_up_at = clock() + policy.total_wait_s
        self.delay = policy.first_wait_s
        self.max_wait_s = policy.max_wait_s

    def next(self) -> float | None:
        if self.clock() + self.delay > self.give_up_at:
            return None
        delay, self.delay = self.delay, min(self.delay * 2, self.max_wait_s)
        return delay


def claim_once(
    store: IdempotencyStore, request: IdempotentRequest, key: str, fingerprint: str
) -> Owned | IdempotencyRecord | Response | None:
    """One look at the key: Owned (reserved, or a stale lease taken over), the finalized record to
    replay, the 422 answer when the key is bound to another request, or None while another owner holds
    it (wait, then look again). ``fingerprint`` is ``payload_fingerprint(request.payload)``, computed
    once per request. Raises the store's errors (a StorageError: answer it with ``store_failure``)."""
    binding = (request.operation, request.resource, fingerprint)
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
        if not store.is_lease_stale(record):
            return None
        successor = store.takeover(claim)
        if successor is not None:
            return successor
        # someone else changed it first: look again without waiting


def in_progress(key: str) -> Response:
    """The answer of a duplicate that waited its bound while another owner held the key (409 here; an
    HTTP server may answer 503 with Retry-After instead)."""
    return problem(409, IN_PROGRESS, f"key {key!r} is being processed; retry later")


def _claim(
    store: IdempotencyStore,
    request: IdempotentRequest,
    key: str,
    policy: Policy,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> Owned | IdempotencyRecord | Response:
    """Own the key, or the finalized record to replay, or the answer (422, 409) when neither is
    possible. Raises the store's errors."""
    fingerprint = payload_fingerprint(request.payload)
    backoff = Backoff(policy, clock)
    while True:
        claim = claim_once(store, request, key, fingerprint)
        if claim is not None:
            return claim
        delay = backoff.next()
        if delay is None:
            return in_progress(key)
        sleep(delay)


class Ownership:
    """Everything an owner does, from its reservation to the settlement of its outcome, in steps a caller
    drives (``run_idempotent`` in one thread; an async server from its event loop, each step in a worker
    thread): ``start()``, then, when it returns None, the handler under ``context``, then exactly one of
    ``finish(result)`` or ``abandon(exc)``.

    Heartbeats run on a daemon thread from ``start()`` until the settlement, reconciliation included.
    After asking a reconciler, which can take long, ownership is proven again by a fenced heartbeat CAS
    before ``start()`` lets the handler run; so it is whenever ``lost`` already says ownership cannot be
    proven when the handler would start (an owner stalled since its reservation, before any heartbeat ran,
    for most of its lease): a handler never starts for a record this owner no longer owns.
    """

    def __init__(
        self,
        store: IdempotencyStore,
        owned: Owned,
        request: IdempotentRequest,
        reconciler: Reconciler | None = None,
        replayer: Replayer | None = None,
        policy: Policy = Policy(),
    ) -> None:
        self.store = store
        self.request = request
        self.reconciler = reconciler
        self.replayer = replayer
        self.policy = policy
        interval = policy.heartbeat_s if policy.heartbeat_s is not None else store.lease.total_seconds() / 3
        self.keeper = LeaseKeeper(store, owned, interval, policy.lease_margin_s)

    @property
    def context(self) -> OwnerContext:
        """What the handler gets while it owns the key (``commit_key``, ``lost``...)."""
        return OwnerContext(self.request, self.keeper)

    def start(self) -> Response | None:
        """Start heartbeating; reconcile the attempt this reservation replaced, if any. None: run the
        handler now. A Response: the answer (replayed, the terminal AMBIGUOUS 500, 409 after losing the
        record, or a failure's 503/500 with the reservation released); heartbeats are stopped then."""
        self.keeper.__enter__()
        try:
            answer = self._reconciled()
            if answer is None:
                answer = self._proven()
        except BaseException:
            self.keeper.stop()
            raise
        if answer is not None:
            self.keeper.stop()
        return answer

    def _proven(self) -> Response | None:
        """None when the handler may start: ownership is provable now. No heartbeat runs between the
        reservation and ``start()``, so an owner stalled there (its process not scheduled, its worker
        thread queued) for most of its lease may have been taken over by a duplicate that ran or is running
        the handler: when ``lost`` says so, a fenced heartbeat CAS proves ownership first, and an owner
        that lost the record answers as overtaken (the successor's outcome, or 409) without running it.
        Costs no request while ``lost`` is False."""
        keeper = self.keeper
        if not keeper.lost:
            return None
        # Nothing ran under this reservation; only a replaced attempt may have had an effect.
        subtype = OUTCOME_UNSETTLED if keeper.owned.previous is not None else None
        try:
            owns = keeper.confirm()
        except BaseException as exc:
            return _release(self.store, keeper, self.policy, exc, STORE_FAILED, subtype)
        if owns:
            return None
        if keeper.loss is None and keeper.error is not None:
            return _release(self.store, keeper, self.policy, keeper.error, STORE_FAILED, subtype)
        return _overtaken(keeper, self.replayer)

    def _reconciled(self) -> Response | None:
        store, keeper, policy = self.store, self.keeper, self.policy
        previous = keeper.owned.previous
        if previous is None:
            return None
        # A former attempt may have had its effect: ask the engine before running again.
        try:
            answer = _reconcile(previous, self.reconciler)
        except BaseException as exc:
            return _release(store, keeper, policy, exc, RECONCILE_ERROR)
        if answer is not None:
            outcome = answer.outcome
            if outcome is None:
                outcome = HandlerResult(500, {"reason": answer.reason}, error_subtype=RECONCILE_FAILED)
            keeper.stop()
            settled = _settle(store, keeper.owned, outcome, policy)
            if settled is None and outcome.attachment is not None:
                # The answer is the stored record's replay, and its body is an attachment no record
                # names: there is nothing a replayer could read. The effect is on record in the
                # engine: the retry reconciles it again.
                return problem(
                    503,
                    STORE_UNAVAILABLE,
                    f"the reconciled outcome of key {keeper.owned.record.key!r} could not be stored; retry",
                )
            record = settled if settled is not None else _record_of(keeper.owned, outcome)
            return replay(record, self.replayer)
        if self.reconciler is not None:
            try:
                owns = keeper.confirm()
            except BaseException as exc:
                return _release(store, keeper, policy, exc, STORE_FAILED)
            if not owns:
                if keeper.loss is None and keeper.error is not None:
                    return _release(store, keeper, policy, keeper.error, STORE_FAILED)
                return _overtaken(keeper, self.replayer)
        return None

    def finish(self, result: object, *, maybe_applied: bool = False) -> Response:
        """Settle the handler's ``result``: stored when replayable (2xx, deterministic 4xx), else the
        reservation is cancelled; the answer is ``result`` as a Response (``replayed=False``), whatever
        the store did. ``maybe_applied``: a result that is not stored may still follow an effect (an HTTP
        app's 5xx, which a framework may have made from an exception raised after the write): the
        cancelled record is then unsettled, as after an exception. A result the store could not keep is
        the handler's failure: the reservation is abandoned and TypeError/ValueError raised."""
        try:
            checked = _checked(result, self.keeper.owned)
        except (TypeError, ValueError) as exc:
            self.abandon(exc)
            raise
        keeper, store, policy = self.keeper, self.store, self.policy
        keeper.stop()
        if keeper.loss is not None:
            pass  # the store already said another party holds the record: finalize/cancel would be fenced
        elif is_replayable(checked.status):
            _settle(store, keeper.owned, checked, policy)
        else:
            subtype = OUTCOME_UNSETTLED if maybe_applied else None
            _best_effort(lambda: store.cancel(keeper.owned, error_subtype=subtype), policy)
        return Response(checked.status, checked.summary, checked.headers, False, checked.error_subtype)

    def abandon(self, exc: BaseException) -> None:
        """The handler raised ``exc`` (or its caller gave the attempt up): stop heartbeating and cancel
        the reservation. An exception is not proof that nothing happened (the effect may have landed
        before a connection reset): the record is marked unsettled, so a retry reconciles (AMBIGUOUS
        without a reconciler), unless ``exc`` is NoEffect. Never raises an Exception."""
        self.keeper.stop()
        subtype = None if isinstance(exc, NoEffect) else OUTCOME_UNSETTLED
        _best_effort(lambda: self.store.cancel(self.keeper.owned, error_subtype=subtype), self.policy)


def _overtaken(keeper: LeaseKeeper, replayer: Replayer | None) -> Response:
    """The answer of an owner that lost its record before running the handler: the successor's stored
    outcome if it finalized one, else 409 (the successor is still at work, or gave the key up)."""
    record = getattr(keeper.loss, "record", None)
    if record is not None and record.status is RecordStatus.FINALIZED:
        return replay(record, replayer)
    key = keeper.owned.record.key
    return problem(409, IN_PROGRESS, f"key {key!r} was taken over by another attempt; retry later")


def _release(
    store: IdempotencyStore,
    keeper: LeaseKeeper,
    policy: Policy,
    exc: BaseException,
    subtype: str,
    cancelled_as: str | None = OUTCOME_UNSETTLED,
) -> Response:
    """A failure while owning, before the handler ran: give the reservation up (CANCELLED, by default
    marked as an attempt whose effect is unsettled, so the next retry takes it at once and reconciles
    again; None when nothing can have had an effect) and answer with the failure's outcome. Not an
    Exception (KeyboardInterrupt...): released, re-raised."""
    keeper.stop()
    _best_effort(lambda: store.cancel(keeper.owned, error_subtype=cancelled_as), policy)
    if not isinstance(exc, Exception):
        raise exc
    return _failure(exc, subtype)


def store_failure(exc: StorageError) -> Response:
    """The answer to a store error while claiming a key (503 when unavailable, 500 otherwise)."""
    return _failure(exc, STORE_FAILED)


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
                attachment=result.attachment,
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
    """The record finalizing ``result`` would store (its attachment described, not written). TypeError
    for an attachment that is not bytes."""
    attachment = result.attachment
    return owned.record.next(
        status=RecordStatus.FINALIZED,
        http_status=result.status,
        summary=result.summary,
        headers=result.headers,
        error_subtype=result.error_subtype,
        attachment=None if attachment is None else Attachment.of(owned.record.reservation_id, attachment),
    )


def replay(record: IdempotencyRecord, replayer: Replayer | None = None) -> Response:
    """The answer of a duplicate of the finalized ``record`` (``replayed=True``): the terminal 500 of an
    AMBIGUOUS verdict, else ``replayer(record)`` (default: the stored outcome as is, without the
    attachment: a replayer that needs it reads ``store.attachment(record)``), or 500
    ``idempotency_replay_failed`` when the replayer raises ReplayUnavailableError. A replayer reading the
    store may raise its errors: CorruptRecordError (a missing or damaged attachment) is 500
    ``idempotency_record_corrupt``, an unavailable store 503; nothing is re-run either way."""
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
    except (CorruptRecordError, StoreUnavailableError, BackendUnavailableError) as exc:
        return _failure(exc, REPLAY_FAILED)
    return Response(result.status, result.summary, result.headers, True, result.error_subtype)
