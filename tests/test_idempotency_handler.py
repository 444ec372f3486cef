"""run_idempotent on every backend: the status-code table, replay, bounded waiting, reconciliation verdicts,
store failures, and the storage requests one idempotent request adds."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from idempotency_crash_worker import (
    TABLE,
    commit_request,
    committed_keys,
    describe_commit,
    open_engine,
    run_commit,
)

from contract_tests.counting import CountingAdapter
from storage_adapter import open_adapter
from storage_adapter.engine import CommitRequest, EngineSettings
from storage_adapter.errors import BackendUnavailableError
from storage_adapter.idempotency import (
    ByOperation,
    HandlerResult,
    IdempotencyStore,
    IdempotentRequest,
    KeyFormat,
    NoEffect,
    Owned,
    Policy,
    ReconcileVerdict,
    Reconciliation,
    RecordStatus,
    ReplayUnavailableError,
    payload_fingerprint,
    run_idempotent,
)
from storage_adapter.idempotency.engine_reconciler import EngineReconciler


class Calls:
    """A handler that counts its runs and answers with a fixed result."""

    def __init__(self, result: HandlerResult) -> None:
        self.result = result
        self.runs = 0

    def __call__(self, ctx: Any) -> HandlerResult:
        self.runs += 1
        return self.result


def request(key: str | None, **changes: Any) -> IdempotentRequest:
    fields = {"realm": "tenant-a", "key": key, "operation": "commit", "resource": "t", "payload": {"a": 1}}
    return IdempotentRequest(**{**fields, **changes})


def new_key() -> str:
    return str(uuid.uuid4())


def later(minutes: float) -> Any:
    """A clock ``minutes`` ahead of real time: a retrier for whom every earlier lease is stale."""
    return lambda: datetime.now(UTC) + timedelta(minutes=minutes)


def test_missing_and_malformed_keys_are_400_and_write_nothing(adapter: Any) -> None:
    counting = CountingAdapter(adapter)
    store = IdempotencyStore(counting)
    handler = Calls(HandlerResult(200))
    for bad in (None, "", "nope", new_key().upper(), "x" * 5000):
        response = run_idempotent(store, request(bad), handler)
        assert (response.status, response.problem_type) == (400, "idempotency_key_invalid")
    assert handler.runs == 0 and counting.total == 0


def test_key_format_is_configurable(adapter: Any) -> None:
    store = IdempotencyStore(adapter, key_format=KeyFormat("order ids", r"order-[0-9]{1,12}", 18))
    assert run_idempotent(store, request("order-42"), Calls(HandlerResult(201))).status == 201
    assert run_idempotent(store, request(new_key()), Calls(HandlerResult(201))).status == 400


def test_finalized_outcome_is_replayed_and_the_handler_does_not_rerun(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()
    handler = Calls(HandlerResult(201, {"version": 7}, (("Location", "/t/7"),)))
    first = run_idempotent(store, request(key), handler)
    assert (first.status, first.summary, first.replayed) == (201, {"version": 7}, False)
    second = run_idempotent(store, request(key, payload={"a": 1}), handler)
    assert (second.status, second.summary, second.headers, second.replayed) == (
        201,
        {"version": 7},
        first.headers,
        True,
    )
    assert handler.runs == 1


@pytest.mark.parametrize(
    "change",
    [{"operation": "drop"}, {"resource": "other"}, {"payload": {"a": 2}}],
    ids=["op", "resource", "payload"],
)
def test_same_key_for_another_request_is_422(adapter: Any, change: dict[str, Any]) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()
    run_idempotent(store, request(key), Calls(HandlerResult(200)))
    handler = Calls(HandlerResult(200))
    response = run_idempotent(store, request(key, **change), handler)
    assert (response.status, response.problem_type) == (422, "idempotency_key_conflict") and handler.runs == 0


def test_same_key_in_another_realm_is_another_request(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()
    run_idempotent(store, request(key), Calls(HandlerResult(200, "tenant-a's")))
    handler = Calls(HandlerResult(200, "tenant-b's"))
    response = run_idempotent(store, request(key, realm="tenant-b"), handler)
    assert (response.summary, response.replayed, handler.runs) == ("tenant-b's", False, 1)


def test_deterministic_4xx_is_stored_other_errors_cancel(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    for status, stored in ((404, True), (409, True), (500, False), (503, False), (401, False), (429, False)):
        key = new_key()
        handler = Calls(HandlerResult(status, error_subtype="boom"))
        assert run_idempotent(store, request(key), handler).status == status
        again = run_idempotent(store, request(key), handler)
        assert again.replayed is stored and handler.runs == (1 if stored else 2), status
        loaded = store.load("tenant-a", key)
        assert loaded is not None
        assert loaded.record.status is (RecordStatus.FINALIZED if stored else RecordStatus.CANCELLED)


def test_handler_exception_cancels_and_propagates(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()

    def explode(ctx: Any) -> HandlerResult:
        raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError, match="handler failed"):
        run_idempotent(store, request(key), explode)
    loaded = store.load("tenant-a", key)
    assert loaded is not None and loaded.record.status is RecordStatus.CANCELLED
    assert loaded.record.error_subtype == "idempotency_outcome_unsettled"  # issue 32: maybe applied


class Effects:
    """A handler's effect, counted in storage: one object per run that got as far as applying it."""

    def __init__(self, adapter: Any, key: str) -> None:
        self.adapter = adapter
        self.prefix = f"effects/{key}"

    def apply(self) -> None:
        self.adapter.write(f"{self.prefix}/{uuid.uuid4().hex}", b"applied")

    @property
    def count(self) -> int:
        return len(self.adapter.list(self.prefix))


def test_a_handler_that_raises_after_its_effect_is_never_run_again(adapter: Any) -> None:
    """Issue 32: an exception is not proof that nothing happened. A handler that applies its effect and
    then raises (a connection reset after the write) used to leave the record CANCELLED, and without a
    reconciler the retry ran the handler again: the effect was stored twice. Now the retry answers the
    terminal AMBIGUOUS outcome (500 ``idempotency_reconcile_failed``, replayed to every later retry)."""
    store = IdempotencyStore(adapter)
    key = new_key()
    effects = Effects(adapter, key)

    def apply_then_reset(ctx: Any) -> HandlerResult:
        effects.apply()
        raise ConnectionResetError("connection reset after the write")

    with pytest.raises(ConnectionResetError):
        run_idempotent(store, request(key), apply_then_reset)

    def apply(ctx: Any) -> HandlerResult:
        effects.apply()
        return HandlerResult(201, {"applied": True})

    for _ in range(2):
        retry = run_idempotent(store, request(key), apply)
        assert (retry.status, retry.problem_type, retry.replayed) == (
            500,
            "idempotency_reconcile_failed",
            True,
        )
    assert effects.count == 1


def test_a_handler_that_raised_is_reconciled_before_any_rerun(adapter: Any) -> None:
    """With a reconciler, the attempt that raised is asked about: APPLIED replays its outcome (the handler
    does not run again), NOT_APPLIED runs it."""
    store = IdempotencyStore(adapter)
    for verdict, runs in ((ReconcileVerdict.APPLIED, 0), (ReconcileVerdict.NOT_APPLIED, 1)):
        key = new_key()

        def reset(ctx: Any) -> HandlerResult:
            raise ConnectionResetError("reset")

        with pytest.raises(ConnectionResetError):
            run_idempotent(store, request(key), reset)
        outcome = HandlerResult(201, {"version": 4}) if verdict is ReconcileVerdict.APPLIED else None
        reconciler = Answer(Reconciliation(verdict, outcome))
        handler = Calls(HandlerResult(201, {"version": 5}))
        retry = run_idempotent(store, request(key), handler, reconciler=reconciler)
        assert (retry.status, handler.runs, len(reconciler.asked)) == (201, runs, 1), verdict
        assert retry.summary == {"version": 4 if runs == 0 else 5}


def test_no_effect_says_nothing_happened_and_the_retry_runs(adapter: Any) -> None:
    """The documented "nothing happened": a handler that raises NoEffect (its cause chained) before any
    effect leaves a plain CANCELLED record, and a retry without a reconciler runs the request."""
    store = IdempotencyStore(adapter)
    key = new_key()
    effects = Effects(adapter, key)

    def refuse(ctx: Any) -> HandlerResult:
        try:
            raise TimeoutError("the catalog's lock was not granted")
        except TimeoutError as exc:
            raise NoEffect("gave up before writing") from exc

    with pytest.raises(NoEffect, match="gave up before writing"):
        run_idempotent(store, request(key), refuse)
    loaded = store.load("tenant-a", key)
    assert loaded is not None and loaded.record.status is RecordStatus.CANCELLED
    assert loaded.record.error_subtype is None

    def apply(ctx: Any) -> HandlerResult:
        effects.apply()
        return HandlerResult(201, {"applied": True})

    retry = run_idempotent(store, request(key), apply)
    assert (retry.status, retry.replayed, effects.count) == (201, False, 1)
    assert run_idempotent(store, request(key), apply).replayed and effects.count == 1


@pytest.mark.parametrize(
    "result",
    [
        HandlerResult("200"),
        HandlerResult(201, {"rows": float("nan")}),
        HandlerResult(201, {"rows": 2**64}),
        HandlerResult(500, headers=(("Retry-After", 5),)),
        None,
        {"status": 200},
    ],  # type: ignore[arg-type]
    ids=["str-status", "nan-summary", "int64-overflow", "int-header", "none", "dict"],
)
def test_invalid_handler_result_cancels_and_raises_never_a_stuck_record(adapter: Any, result: Any) -> None:
    """Issue 12 finding 7: a result the store could not keep is the handler's failure, like an exception:
    the reservation is cancelled (never left in progress) and the error names the handler's result. The
    handler ran to its end, so its effect may have happened (issue 32): the record is unsettled, and a
    retry reconciles first (NOT_APPLIED here: it runs)."""
    store = IdempotencyStore(adapter)
    key = new_key()
    with pytest.raises((TypeError, ValueError), match="handler returned"):
        run_idempotent(store, request(key), Calls(result))
    loaded = store.load("tenant-a", key)
    assert loaded is not None and loaded.record.status is RecordStatus.CANCELLED
    assert loaded.record.error_subtype == "idempotency_outcome_unsettled"
    retry = Calls(HandlerResult(200, {"ok": True}))
    not_applied = Answer(Reconciliation(ReconcileVerdict.NOT_APPLIED))
    response = run_idempotent(store, request(key), retry, reconciler=not_applied)
    assert response.status == 200 and retry.runs == 1 and len(not_applied.asked) == 1


def test_in_flight_duplicate_waits_with_bounded_backoff_then_409(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()
    owned = store.reserve("tenant-a", key, operation="commit", resource="t", fingerprint=_fingerprint())
    assert isinstance(owned, Owned)
    sleeps: list[float] = []
    handler = Calls(HandlerResult(200))
    policy = Policy(first_wait_s=0.01, max_wait_s=0.04, total_wait_s=0.2)
    # The wait runs on a clock only its sleeps advance: the same sleeps however slow the server answers
    # (a real clock lost the third sleep on a busy machine).
    now = [0.0]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    response = run_idempotent(store, request(key), handler, policy=policy, sleep=sleep, clock=lambda: now[0])
    assert (response.status, response.problem_type, handler.runs) == (409, "idempotency_in_progress", 0)
    assert sleeps[:3] == [0.01, 0.02, 0.04] and set(sleeps[2:]) == {0.04}  # doubling, capped; never 0
    assert sum(sleeps) <= policy.total_wait_s


def test_duplicate_replays_once_the_owner_finalizes_during_the_wait(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()
    owned = store.reserve("tenant-a", key, operation="commit", resource="t", fingerprint=_fingerprint())
    assert isinstance(owned, Owned)

    def finalize_then_sleep(seconds: float) -> None:
        store.finalize(owned, http_status=201, summary={"version": 3})

    response = run_idempotent(store, request(key), Calls(HandlerResult(500)), sleep=finalize_then_sleep)
    assert (response.status, response.summary, response.replayed) == (201, {"version": 3}, True)


def test_replay_impossible_is_500_replay_failed_and_never_reruns(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()
    handler = Calls(HandlerResult(200, {"metadata": "s3://gone/v1.json"}))
    run_idempotent(store, request(key), handler)

    def purged(record: Any) -> HandlerResult:
        raise ReplayUnavailableError(f"{record.summary['metadata']} was purged")

    response = run_idempotent(store, request(key), handler, replayer=purged)
    assert (response.status, response.problem_type, handler.runs) == (500, "idempotency_replay_failed", 1)


class Answer:
    def __init__(self, answer: Reconciliation) -> None:
        self.answer = answer
        self.asked: list[Any] = []

    def reconcile(self, record: Any) -> Reconciliation:
        self.asked.append(record)
        return self.answer


@pytest.mark.parametrize("verdict", list(ReconcileVerdict))
def test_stale_owner_is_reconciled(adapter: Any, verdict: ReconcileVerdict) -> None:
    crashed = IdempotencyStore(adapter)
    key = new_key()
    assert isinstance(
        crashed.reserve("tenant-a", key, operation="commit", resource="t", fingerprint=_fingerprint()), Owned
    )
    retrier = IdempotencyStore(adapter, clock=later(10))
    outcome = HandlerResult(201, {"version": 9}) if verdict is ReconcileVerdict.APPLIED else None
    reconciler = Answer(Reconciliation(verdict, outcome, reason="partial state"))
    handler = Calls(HandlerResult(201, {"version": 10}))
    response = run_idempotent(retrier, request(key), handler, reconciler=reconciler)
    assert len(reconciler.asked) == 1 and reconciler.asked[0].key == key
    expected = {
        ReconcileVerdict.APPLIED: (201, {"version": 9}, True, 0),
        ReconcileVerdict.NOT_APPLIED: (201, {"version": 10}, False, 1),
        ReconcileVerdict.AMBIGUOUS: (500, None, True, 0),
    }[verdict]
    summary = response.summary if verdict is not ReconcileVerdict.AMBIGUOUS else None
    assert (response.status, summary, response.replayed, handler.runs) == expected
    if verdict is ReconcileVerdict.AMBIGUOUS:
        assert response.problem_type == "idempotency_reconcile_failed"
    again = run_idempotent(retrier, request(key), handler, reconciler=reconciler)  # one stable answer
    assert (again.status, again.replayed, handler.runs, len(reconciler.asked)) == (
        response.status,
        True,
        expected[3],
        1,
    )


def test_stale_owner_without_a_reconciler_is_ambiguous(adapter: Any) -> None:
    key = new_key()
    IdempotencyStore(adapter).reserve(
        "tenant-a", key, operation="commit", resource="t", fingerprint=_fingerprint()
    )
    handler = Calls(HandlerResult(200))
    response = run_idempotent(IdempotencyStore(adapter, clock=later(10)), request(key), handler)
    assert (response.status, response.problem_type, handler.runs) == (500, "idempotency_reconcile_failed", 0)


def test_unstorable_response_cancels_and_a_retry_reconciles_from_the_engine(adapter: Any) -> None:
    """A 2xx whose summary is too large to store is returned, the record cancelled; the retry asks the
    engine (the commit landed) and replays the engine's answer instead of committing twice."""
    store = IdempotencyStore(adapter, max_summary_bytes=256)
    engine = open_engine(adapter)
    key = new_key()

    def big(ctx: Any) -> HandlerResult:
        commit = engine.commit({TABLE: pa.table({"id": [1]})}, CommitRequest(idempotency_key=ctx.commit_key))
        return HandlerResult(201, {"version": commit.version, "rows": "x" * 1000})

    reconciler = EngineReconciler(engine, describe_commit)
    first = run_idempotent(store, commit_request(key), big, reconciler=reconciler)
    assert first.status == 201 and not first.replayed
    loaded = store.load("tenant-a", key)
    assert loaded is not None and loaded.record.status is RecordStatus.CANCELLED
    retry = run_commit(store, engine, key)
    assert (retry.status, retry.summary, retry.replayed) == (201, {"version": first.summary["version"]}, True)
    assert committed_keys(engine) == [f"tenant-a/{key}"]


def test_reconcilers_by_operation_never_guess(adapter: Any) -> None:
    key = new_key()
    IdempotencyStore(adapter).reserve(
        "tenant-a", key, operation="drop", resource="t", fingerprint=_fingerprint()
    )
    applied = Answer(Reconciliation(ReconcileVerdict.APPLIED, HandlerResult(204)))
    by_operation = ByOperation({"commit": applied})
    handler = Calls(HandlerResult(204))
    retrier = IdempotencyStore(adapter, clock=later(10))
    response = run_idempotent(retrier, request(key, operation="drop"), handler, reconciler=by_operation)
    assert (response.status, response.problem_type, handler.runs) == (500, "idempotency_reconcile_failed", 0)
    assert applied.asked == []


class UnreachableEngine:
    """The engine's side of reconciliation when its storage is down."""

    settings = EngineSettings()

    def heal(self) -> None:
        raise BackendUnavailableError("engine storage down", key="manifest")

    def find_commit(self, idempotency_key: str) -> None:
        raise AssertionError("not reached")


def test_engine_unavailable_during_reconciliation_is_503_and_released(adapter: Any) -> None:
    key = new_key()
    IdempotencyStore(adapter).reserve(
        "tenant-a", key, operation="commit", resource="t", fingerprint=_fingerprint()
    )
    retrier = IdempotencyStore(adapter, clock=later(10))
    handler = Calls(HandlerResult(201))
    reconciler = EngineReconciler(UnreachableEngine(), describe_commit)
    response = run_idempotent(retrier, request(key), handler, reconciler=reconciler)
    assert (response.status, response.problem_type, handler.runs) == (503, "idempotency_store_unavailable", 0)
    stored = retrier.load("tenant-a", key)
    # Released (issue 16 hole 5c): not IN_PROGRESS under a lease nobody holds, so the next retry does not
    # wait for it to lapse but takes it at once and reconciles again.
    assert stored is not None and stored.record.status is RecordStatus.CANCELLED
    again = run_idempotent(retrier, request(key), handler, reconciler=reconciler)
    assert (again.status, again.problem_type, handler.runs) == (503, "idempotency_store_unavailable", 0)


class Slow:
    """Delegates to an adapter, but every request first sleeps: a store slower than its deadline."""

    def __init__(self, inner: Any, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(self.seconds)
            return method(*args, **kwargs)

        return slow


def test_slow_store_fails_fast_with_503(adapter: Any) -> None:
    store = IdempotencyStore(Slow(adapter, 2.0), call_timeout=timedelta(seconds=0.1))
    handler = Calls(HandlerResult(200))
    response = run_idempotent(store, request(new_key()), handler)
    assert (response.status, response.problem_type, handler.runs) == (503, "idempotency_store_unavailable", 0)


def test_unreachable_store_is_503() -> None:
    dead = open_adapter(
        "s3://nowhere",
        endpoint="http://127.0.0.1:9",
        allow_http=True,
        max_retries=0,
        access_key_id="x",
        secret_access_key="y",
        region="us-east-1",
    )
    handler = Calls(HandlerResult(200))
    response = run_idempotent(IdempotencyStore(dead, call_timeout=None), request(new_key()), handler)
    assert (response.status, response.problem_type, handler.runs) == (503, "idempotency_store_unavailable", 0)


class FailFinalize:
    """Delegates to an adapter whose CAS writes are unavailable: finalize can never land."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.attempts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_if_match(self, key: str, data: bytes, token: str) -> str | None:
        self.attempts += 1
        raise BackendUnavailableError(f"injected outage writing {key}", key=key)


def test_finalize_is_best_effort_and_does_not_hang_the_caller(adapter: Any) -> None:
    failing = FailFinalize(adapter)
    store = IdempotencyStore(failing)
    key = new_key()
    response = run_idempotent(
        store, request(key), Calls(HandlerResult(201, {"v": 1})), policy=Policy(settle_attempts=3)
    )
    assert (response.status, response.replayed) == (201, False)
    assert failing.attempts == 3
    loaded = store.load("tenant-a", key)
    assert loaded is not None and loaded.record.status is RecordStatus.IN_PROGRESS  # reconciled later


def test_heartbeats_keep_a_long_handler_owned(adapter: Any) -> None:
    store = IdempotencyStore(adapter, lease=timedelta(seconds=3))
    key = new_key()
    seen: list[Any] = []

    def long_handler(ctx: Any) -> HandlerResult:
        while ctx.keeper.heartbeats < 2:
            time.sleep(0.02)
        seen.append(ctx.lost)
        return HandlerResult(200)

    response = run_idempotent(store, request(key), long_handler, policy=Policy(heartbeat_s=0.05))
    assert response.status == 200 and seen == [False]
    loaded = store.load("tenant-a", key)
    assert (
        loaded is not None and loaded.record.status is RecordStatus.FINALIZED and loaded.record.revision >= 3
    )


def test_request_counts_per_idempotent_request(adapter: Any) -> None:
    """Storage requests the idempotency layer adds (the handler's own requests excluded)."""
    counting = CountingAdapter(adapter)
    store = IdempotencyStore(counting)
    key = new_key()
    run_idempotent(store, request(key), Calls(HandlerResult(201, {"version": 1})))
    assert counting.counts == Counter({"write_if_absent": 1, "write_if_match": 1})  # reserve, finalize
    counting.reset()
    assert run_idempotent(store, request(key), Calls(HandlerResult(201))).replayed
    assert counting.counts == Counter({"write_if_absent": 1, "read_versioned": 1})


def test_first_call_costs_at_most_reserve_and_finalize() -> None:
    """Issue 16: a first-time request whose handler does no storage I/O costs at most 2 requests on
    memory:// (reserve, finalize): write_if_absent returns the record's token, so finalize CASes on it
    without reading the record back first."""
    counting = CountingAdapter(open_adapter(f"memory://first-call-{uuid.uuid4().hex}"))
    response = run_idempotent(IdempotencyStore(counting), request(new_key()), Calls(HandlerResult(201)))
    assert (response.status, response.replayed) == (201, False)
    assert counting.total <= 2, dict(counting.counts)
    assert counting.counts == Counter({"write_if_absent": 1, "write_if_match": 1})


def _fingerprint() -> str:
    return payload_fingerprint({"a": 1})


class Unavailable:
    """A reconciler whose own storage is down: the protocol lets it raise BackendUnavailableError."""

    def reconcile(self, record: Any) -> Reconciliation:
        from storage_adapter.errors import BackendUnavailableError

        raise BackendUnavailableError("catalog storage down", key=record.key, backend="s3")


def test_any_reconciler_that_is_unavailable_gives_503_not_an_exception(adapter: Any) -> None:
    key = new_key()
    IdempotencyStore(adapter).reserve(
        "tenant-a", key, operation="commit", resource="t", fingerprint=_fingerprint()
    )
    retrier = IdempotencyStore(adapter, clock=later(10))
    handler = Calls(HandlerResult(201))
    response = run_idempotent(retrier, request(key), handler, reconciler=Unavailable())
    assert (response.status, response.problem_type, handler.runs) == (503, "idempotency_store_unavailable", 0)
