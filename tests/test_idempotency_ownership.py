"""Issue 16: ownership is kept and proven through every step of run_idempotent, and every failure (of the
reconciler, the store, a heartbeat, a finalize) ends in a defined outcome that never leaves a record
IN_PROGRESS for nobody. Faults are real backend errors injected at the drivers' fault points
(storage_adapter.faults), on memory:// and on a local directory."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from idempotency_crash_worker import describe_commit, open_engine

from contract_tests.counting import CountingAdapter
from storage_adapter.engine import CorruptSidecarError
from storage_adapter.faults import FaultKind, FaultPlan, injected
from storage_adapter.idempotency import (
    HandlerResult,
    IdempotencyStore,
    IdempotentRequest,
    OwnerContext,
    Policy,
    ReconcileVerdict,
    Reconciliation,
    RecordStatus,
    payload_fingerprint,
    run_idempotent,
)
from storage_adapter.idempotency.engine_reconciler import EngineReconciler
from storage_adapter.idempotency.handler import commit_key

KINDS = list(FaultKind)


@pytest.fixture
def backend(adapter: Any) -> Any:
    """Every embedded backend (memory, local, SeaweedFS), each test under its own random prefix."""
    return adapter


class Faulty:
    """Delegates to an adapter; while ``faults`` names a method, every call of it (in whatever thread makes
    it: the store's deadline threads, the lease keeper's) runs under an injected FaultPlan of that kind, so
    it fails with the real error the driver raises for that fault."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.faults: dict[str, FaultKind] = {}
        self.fired = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            kind = self.faults.get(name)
            if kind is None:
                return method(*args, **kwargs)
            self.fired += 1
            with injected(FaultPlan(kind, times=10**6)):
                return method(*args, **kwargs)

        return call


class Effects:
    """The system of record: a handler applies the effect (once per key, counted), a reconciler answers
    exactly from it."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()

    def handler(self, before: Any = lambda ctx: None) -> Any:
        def run(ctx: OwnerContext) -> HandlerResult:
            before(ctx)
            if ctx.lost:
                return HandlerResult(503, {"reason": "lease lost"})
            self.applied[ctx.commit_key] += 1
            return HandlerResult(201, {"effect": ctx.commit_key})

        return run

    def reconcile(self, record: Any) -> Reconciliation:
        key = commit_key(record)
        if self.applied[key]:
            return Reconciliation(ReconcileVerdict.APPLIED, HandlerResult(201, {"effect": key}))
        return Reconciliation(ReconcileVerdict.NOT_APPLIED)


def request(key: str) -> IdempotentRequest:
    return IdempotentRequest("tenant-a", key, "commit", "t", {"a": 1})


def clock(minutes: float) -> Any:
    return lambda: datetime.now(UTC) + timedelta(minutes=minutes)


def crashed_owner(adapter: Any) -> str:
    """A key whose owner reserved it 10 minutes ago and died: stale for everyone now."""
    key = str(uuid.uuid4())
    IdempotencyStore(adapter, clock=clock(-10)).reserve(
        "tenant-a", key, operation="commit", resource="t", fingerprint=payload_fingerprint({"a": 1})
    )
    return key


def status_of(store: IdempotencyStore, key: str) -> RecordStatus:
    loaded = store.load("tenant-a", key)
    assert loaded is not None
    return loaded.record.status


QUICK = Policy(first_wait_s=0.02, max_wait_s=0.05, total_wait_s=0.3)

# -- hole 2: two owners never both run the handler ------------------------------------------------------


def test_owner_keeps_its_lease_alive_through_a_slow_reconcile(backend: Any) -> None:
    """The successor of a dead owner reconciles for longer than its lease; a second retrier meanwhile
    must find the lease alive (heartbeats run during reconciliation) and not run the handler too."""
    key = crashed_owner(backend)
    effects = Effects()
    entered, release = threading.Event(), threading.Event()

    class Slow:
        def reconcile(self, record: Any) -> Reconciliation:
            entered.set()
            release.wait(30)
            return effects.reconcile(record)

    def short_lease() -> IdempotencyStore:
        return IdempotencyStore(backend, lease=timedelta(seconds=1.5), skew_grace=timedelta(seconds=0.05))

    first: list[Any] = []
    owner = threading.Thread(
        target=lambda: first.append(
            run_idempotent(
                short_lease(),
                request(key),
                effects.handler(),
                reconciler=Slow(),
                policy=Policy(heartbeat_s=0.1),
            )
        )
    )
    owner.start()
    try:
        assert entered.wait(30)
        time.sleep(2.0)  # well past the lease the owner took over with
        second = run_idempotent(
            short_lease(), request(key), effects.handler(), reconciler=effects, policy=QUICK
        )
    finally:
        release.set()
        owner.join(30)
    assert (second.status, second.problem_type) == (409, "idempotency_in_progress")
    assert (first[0].status, first[0].replayed) == (201, False)
    assert sum(effects.applied.values()) == 1


def test_owner_rechecks_ownership_before_running_the_handler(backend: Any) -> None:
    """While the owner reconciles, a successor (whose clock shows the lease stale) takes the record over,
    runs and finalizes. The owner's reconciler then says NOT_APPLIED (asked too early): the owner must
    prove it still owns the record before running the handler, and replays the successor's outcome."""
    key = crashed_owner(backend)
    effects = Effects()
    successor: list[Any] = []

    class Overtaken:
        def reconcile(self, record: Any) -> Reconciliation:
            answer = effects.reconcile(record)
            successor.append(
                run_idempotent(
                    IdempotencyStore(backend, clock=clock(10)),
                    request(key),
                    effects.handler(),
                    reconciler=effects,
                )
            )
            return answer

    owner = run_idempotent(IdempotencyStore(backend), request(key), effects.handler(), reconciler=Overtaken())
    assert (successor[0].status, successor[0].replayed) == (201, False)
    assert (owner.status, owner.summary, owner.replayed) == (201, successor[0].summary, True)
    assert sum(effects.applied.values()) == 1


# -- hole 4 and 5c: a failing reconciler releases the record --------------------------------------------


def failing_reconciler(backend: Any, kind: FaultKind | str) -> Any:
    """A reconciler that fails: the engine's, with a real fault injected into its storage requests, with a
    corrupt recovery sidecar, or any reconciler raising an unexpected exception."""
    engine = open_engine(backend)
    reconciler = EngineReconciler(engine, describe_commit)
    if kind == "corrupt-sidecar":
        backend.write("engine/__recovery/01JC0RRVPTSZDECAR000000000.json", b"{not json")
        return reconciler
    if kind == "exception":

        class Broken:
            def reconcile(self, record: Any) -> Reconciliation:
                raise RuntimeError("reconciler bug")

        return Broken()

    class Injected:
        def reconcile(self, record: Any) -> Reconciliation:
            assert isinstance(kind, FaultKind)
            with injected(FaultPlan(kind, times=10**6)):
                return reconciler.reconcile(record)

    return Injected()


@pytest.mark.parametrize(
    "kind", [FaultKind.DENIED, FaultKind.BROKEN, FaultKind.PANIC, "corrupt-sidecar", "exception"], ids=str
)
def test_reconciler_failure_is_a_defined_outcome_and_releases_the_record(backend: Any, kind: Any) -> None:
    key = crashed_owner(backend)
    store = IdempotencyStore(backend)
    effects = Effects()
    response = run_idempotent(
        store, request(key), effects.handler(), reconciler=failing_reconciler(backend, kind), policy=QUICK
    )
    assert (response.status, response.problem_type, response.replayed) == (
        500,
        "idempotency_reconcile_error",
        False,
    )
    assert status_of(store, key) is RecordStatus.CANCELLED and not effects.applied
    if kind == "corrupt-sidecar":
        with pytest.raises(CorruptSidecarError):
            open_engine(backend).heal()
        backend.delete("engine/__recovery/01JC0RRVPTSZDECAR000000000.json")
    retry = run_idempotent(store, request(key), effects.handler(), reconciler=effects, policy=QUICK)
    assert (retry.status, retry.replayed) == (201, False)  # reconciled at once, not 409
    assert sum(effects.applied.values()) == 1


def test_unavailable_reconciler_is_503_and_releases_the_record(backend: Any) -> None:
    key = crashed_owner(backend)
    store = IdempotencyStore(backend)
    effects = Effects()
    reconciler = failing_reconciler(backend, FaultKind.UNAVAILABLE)
    response = run_idempotent(store, request(key), effects.handler(), reconciler=reconciler, policy=QUICK)
    assert (response.status, response.problem_type) == (503, "idempotency_store_unavailable")
    assert status_of(store, key) is RecordStatus.CANCELLED and not effects.applied
    retry = run_idempotent(store, request(key), effects.handler(), reconciler=effects, policy=QUICK)
    assert (retry.status, retry.replayed) == (201, False)
    assert sum(effects.applied.values()) == 1


def test_a_released_record_is_never_run_again_without_a_reconciler(backend: Any) -> None:
    """The released record remembers that its attempt may have had an effect: a retry without a reconciler
    is AMBIGUOUS (the terminal reconcile-failed outcome), never a second run."""
    key = crashed_owner(backend)
    store = IdempotencyStore(backend)
    effects = Effects()
    run_idempotent(
        store, request(key), effects.handler(), reconciler=failing_reconciler(backend, "exception")
    )
    retry = run_idempotent(store, request(key), effects.handler())
    assert (retry.status, retry.problem_type, sum(effects.applied.values())) == (
        500,
        "idempotency_reconcile_failed",
        0,
    )


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_store_failure_while_owning_is_a_defined_outcome(backend: Any, kind: FaultKind) -> None:
    """The owner's ownership check after reconciling fails with a real store error: no handler run, a
    defined answer, the record released when the store lets it."""
    key = crashed_owner(backend)
    faulty = Faulty(backend)
    store = IdempotencyStore(faulty)
    effects = Effects()

    class ThenFail:
        def reconcile(self, record: Any) -> Reconciliation:
            faulty.faults["write_if_match"] = kind
            return effects.reconcile(record)

    response = run_idempotent(store, request(key), effects.handler(), reconciler=ThenFail(), policy=QUICK)
    expected = (
        (503, "idempotency_store_unavailable")
        if kind is FaultKind.UNAVAILABLE
        else (500, "idempotency_store_failed")
    )
    assert (response.status, response.problem_type) == expected and not effects.applied
    faulty.faults.clear()
    retry = run_idempotent(
        IdempotencyStore(backend, clock=clock(10)), request(key), effects.handler(), reconciler=effects
    )
    assert (retry.status, retry.replayed, sum(effects.applied.values())) == (201, False, 1)


# -- hole 5a: a failed finalize after the effect still tells the truth -----------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_finalize_failure_after_the_effect_answers_the_handlers_result(backend: Any, kind: FaultKind) -> None:
    faulty = Faulty(backend)
    store = IdempotencyStore(faulty)
    effects = Effects()
    key = str(uuid.uuid4())

    def break_the_store(ctx: Any) -> None:
        faulty.faults["write_if_match"] = kind  # finalize (and any cancel) will fail

    response = run_idempotent(store, request(key), effects.handler(break_the_store), reconciler=effects)
    assert faulty.fired
    assert (response.status, response.replayed) == (201, False)
    assert response.summary["effect"].startswith(f"tenant-a/{key}@")  # ctx.commit_key: realm/key@created_at
    faulty.faults.clear()
    retry = run_idempotent(
        IdempotencyStore(backend, clock=clock(10)), request(key), effects.handler(), reconciler=effects
    )
    assert (retry.status, retry.summary, retry.replayed) == (201, response.summary, True)
    assert sum(effects.applied.values()) == 1


# -- hole 5b: an owner whose heartbeats fail learns it has lost the lease ---------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_failing_heartbeats_make_ctx_lost_before_a_successor_can_take_over(
    backend: Any, kind: FaultKind
) -> None:
    """The owner is cut off (every heartbeat fails with ``kind``). By the time a successor can take the
    record over, ``ctx.lost`` is True, so the owner skips its irreversible step: the effect happens once."""
    faulty = Faulty(backend)
    lease, grace = timedelta(seconds=0.5), timedelta(seconds=0.05)
    store = IdempotencyStore(faulty, lease=lease, skew_grace=grace)
    effects = Effects()
    key = str(uuid.uuid4())
    seen: list[bool] = []
    successor: list[Any] = []

    def cut_off_until_taken_over(ctx: Any) -> None:
        faulty.faults["write_if_match"] = kind
        time.sleep((lease + grace).total_seconds() + 0.2)
        successor.append(
            run_idempotent(
                IdempotencyStore(backend, lease=lease, skew_grace=grace),
                request(key),
                effects.handler(),
                reconciler=effects,
            )
        )
        seen.append(ctx.lost)

    owner = run_idempotent(
        store,
        request(key),
        effects.handler(cut_off_until_taken_over),
        reconciler=effects,
        policy=Policy(heartbeat_s=0.05),
    )
    assert (successor[0].status, successor[0].replayed) == (201, False)
    assert seen == [True] and owner.status == 503
    assert sum(effects.applied.values()) == 1


def test_lost_is_false_while_heartbeats_succeed(backend: Any) -> None:
    store = IdempotencyStore(backend, lease=timedelta(seconds=1.0), skew_grace=timedelta(seconds=0.05))
    seen: list[bool] = []

    def wait(ctx: Any) -> None:
        time.sleep(1.2)  # past the lease: only heartbeats keep ownership proven
        seen.append(ctx.lost)

    effects = Effects()
    response = run_idempotent(
        store, request(str(uuid.uuid4())), effects.handler(wait), policy=Policy(heartbeat_s=0.05)
    )
    assert seen == [False] and response.status == 201


# -- what the paths cost ---------------------------------------------------------------------------------


def test_request_counts_of_takeover_and_reconcile(backend: Any) -> None:
    key = crashed_owner(backend)
    counting = CountingAdapter(backend)
    effects = Effects()
    response = run_idempotent(IdempotencyStore(counting), request(key), effects.handler(), reconciler=effects)
    assert response.status == 201
    # reserve (fails) + read; takeover CAS; ownership check (heartbeat CAS) after reconciling; finalize CAS
    assert counting.counts == Counter({"write_if_absent": 1, "read_versioned": 1, "write_if_match": 3})


# -- the store failing before anything is owned ----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=str)
@pytest.mark.parametrize("method", ["write_if_absent", "read_versioned"])
def test_store_failure_at_reserve_is_a_defined_outcome(backend: Any, kind: FaultKind, method: str) -> None:
    key = crashed_owner(backend) if method == "read_versioned" else str(uuid.uuid4())
    faulty = Faulty(backend)
    faulty.faults[method] = kind
    effects = Effects()
    response = run_idempotent(IdempotencyStore(faulty), request(key), effects.handler(), reconciler=effects)
    expected = (
        (503, "idempotency_store_unavailable")
        if kind is FaultKind.UNAVAILABLE
        else (500, "idempotency_store_failed")
    )
    assert (response.status, response.problem_type) == expected and faulty.fired and not effects.applied
    retry = run_idempotent(IdempotencyStore(backend), request(key), effects.handler(), reconciler=effects)
    assert (retry.status, retry.replayed, sum(effects.applied.values())) == (201, False, 1)


def test_corrupt_record_is_a_defined_outcome_and_kept(backend: Any) -> None:
    store = IdempotencyStore(backend)
    key = str(uuid.uuid4())
    location = store.location("tenant-a", key)
    backend.write(location, b"{not a record")
    response = run_idempotent(store, request(key), Effects().handler())
    assert (response.status, response.problem_type) == (500, "idempotency_record_corrupt")
    assert location in response.summary["detail"] and backend.read_bytes(location) == b"{not a record"
