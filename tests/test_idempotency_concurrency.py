"""Many clients with one Idempotency-Key at once (threads, spawned processes, Spark tasks): the side effect
happens exactly once and everyone gets the same outcome. And a slow-but-alive owner is fenced."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import idempotency_crash_worker
import pytest
from idempotency_crash_worker import (
    commit_request,
    committed_keys,
    committing_handler,
    describe_commit,
    open_engine,
    race_effect,
)

from storage_adapter.idempotency import (
    HandlerResult,
    IdempotencyStore,
    Owned,
    OwnerContext,
    Policy,
    RecordStatus,
    claim_once,
    payload_fingerprint,
    run_idempotent,
)
from storage_adapter.idempotency.engine_reconciler import EngineReconciler
from storage_adapter.idempotency.handler import commit_key

THREADS = 8
PROCESSES = 4
SPARK_TASKS = 8


def assert_exactly_once(adapter: Any, outcomes: list[tuple[str, int, bool]], clients: int) -> None:
    effects = adapter.list("effects")
    assert len(effects) == 1, f"side effect ran {len(effects)} times"
    assert len(outcomes) == clients
    assert {summary for summary, _, _ in outcomes} == {f'{{"effect": "{effects[0].key.split("/")[-1]}"}}'}
    assert {status for _, status, _ in outcomes} == {201}
    assert sorted(replayed for _, _, replayed in outcomes) == [False] + [True] * (clients - 1)


def test_threads_same_key_exactly_once(adapter: Any) -> None:
    key = str(uuid.uuid4())
    barrier = threading.Barrier(THREADS)
    outcomes: list[tuple[str, int, bool]] = []

    def client(worker: str) -> None:
        barrier.wait()
        outcomes.append(race_effect(adapter, key, worker))

    threads = [threading.Thread(target=client, args=(f"t{i}",)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert_exactly_once(adapter, outcomes, THREADS)


def test_processes_same_key_exactly_once(adapter: Any) -> None:
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("memory stores are per process: processes cannot share one")
    key = str(uuid.uuid4())
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    processes = [
        context.Process(
            target=idempotency_crash_worker.race_process, args=(adapter, key, f"p{i}", barrier, results)
        )
        for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert_exactly_once(adapter, outcomes, PROCESSES)


def test_spark_tasks_same_key_exactly_once(adapter: Any, spark: Any) -> None:
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("memory stores are per process: Spark's Python workers cannot share one")
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(idempotency_crash_worker)  # executors cannot import tests/
    key = str(uuid.uuid4())
    tasks = spark.sparkContext.parallelize(range(SPARK_TASKS), SPARK_TASKS)
    outcomes = tasks.map(lambda i: race_effect(adapter, key, f"task{i}")).collect()
    assert_exactly_once(adapter, outcomes, SPARK_TASKS)


def later(minutes: float) -> Any:
    return lambda: datetime.now(UTC) + timedelta(minutes=minutes)


@pytest.mark.parametrize("stalls", ["before_commit", "after_commit"])
def test_slow_owner_is_fenced_and_the_effect_happens_once(adapter: Any, stalls: str) -> None:
    """The owner stalls (no heartbeats) past its lease; a successor whose clock shows the lease stale takes
    over and reconciles. When the owner resumes, its finalize is rejected and the commit exists once."""
    engine = open_engine(adapter)
    reconciler = EngineReconciler(engine, describe_commit)
    key = str(uuid.uuid4())
    owner_store = IdempotencyStore(adapter, lease=timedelta(seconds=30), executor_id="slow-owner")
    successor_store = IdempotencyStore(adapter, clock=later(10), executor_id="successor")
    stalled, resume = threading.Event(), threading.Event()

    def pause(point: str) -> None:
        if point == {"before_commit": "after_reserve", "after_commit": "after_commit"}[stalls]:
            stalled.set()
            resume.wait(60)

    owner_result: list[Any] = []
    owner = threading.Thread(
        target=lambda: owner_result.append(
            run_idempotent(
                owner_store,
                commit_request(key),
                committing_handler(engine, pause),
                reconciler=reconciler,
                policy=Policy(heartbeat_s=3600),  # a stalled owner: no heartbeats
            )
        )
    )
    owner.start()
    assert stalled.wait(60)
    successor = run_idempotent(
        successor_store, commit_request(key), committing_handler(engine), reconciler=reconciler
    )
    reservation = successor_store.load("tenant-a", key)
    assert reservation is not None
    landed = engine.find_commit(commit_key(reservation.record))
    assert landed is not None and (successor.status, successor.summary) == (201, {"version": landed.version})
    assert successor.replayed is (stalls == "after_commit")  # reconciled APPLIED vs NOT_APPLIED and ran
    settled = successor_store.load("tenant-a", key)
    assert settled is not None and settled.record.executor_id == "successor"
    resume.set()
    owner.join(60)
    assert owner_result[0].status == 201
    final = successor_store.load("tenant-a", key)
    assert final == settled  # the old owner's finalize was fenced: not one byte changed
    assert final is not None and final.record.status is RecordStatus.FINALIZED
    assert committed_keys(engine) == [f"tenant-a/{key}"]


class StallsAfterReserve(IdempotencyStore):
    """An owner's store: right after its reservation succeeds, ``stall`` runs in the owner's thread, as if
    its process were not scheduled between the reservation and the handler (no heartbeat runs then)."""

    def __init__(self, adapter: Any, stall: Any, **kwargs: Any) -> None:
        super().__init__(adapter, **kwargs)
        self.stall = stall

    def reserve(self, realm: str, key: str, **kwargs: Any) -> Any:
        claim = super().reserve(realm, key, **kwargs)
        if isinstance(claim, Owned):
            self.stall()
        return claim


@pytest.mark.parametrize("successor", ["finalized", "in_progress"])
def test_an_owner_stalled_before_its_handler_never_runs_it_after_a_takeover(
    adapter: Any, successor: str
) -> None:
    """The owner reserves the key, then stalls before its handler starts for longer than its lease plus
    the skew grace (an injected clock jumps); a successor takes the key over meanwhile and finalizes it, or
    still works on it. The owner must not run its handler for a record it no longer owns: it answers the
    successor's stored outcome (replayed) or 409, and the engine has one commit with the key."""
    engine = open_engine(adapter)
    reconciler = EngineReconciler(engine, describe_commit)
    key = str(uuid.uuid4())
    now = [datetime.now(UTC)]
    lease, grace = timedelta(seconds=30), timedelta(seconds=5)
    successor_store = IdempotencyStore(adapter, clock=lambda: now[0], lease=lease, executor_id="successor")
    answers: list[Any] = []

    def stall() -> None:
        now[0] += lease + grace + timedelta(seconds=1)
        if successor == "finalized":
            answers.append(
                run_idempotent(
                    successor_store, commit_request(key), committing_handler(engine), reconciler=reconciler
                )
            )
        else:
            fingerprint = payload_fingerprint(commit_request(key).payload)
            claim = claim_once(successor_store, commit_request(key), key, fingerprint)
            assert isinstance(claim, Owned) and claim.previous is not None  # taken over, left in progress

    owner_store = StallsAfterReserve(
        adapter, stall, clock=lambda: now[0], lease=lease, skew_grace=grace, executor_id="owner"
    )
    runs: list[str] = []

    def owner_handler(ctx: OwnerContext) -> HandlerResult:
        runs.append(ctx.commit_key)
        return committing_handler(engine)(ctx)

    answer = run_idempotent(owner_store, commit_request(key), owner_handler, reconciler=reconciler)
    assert runs == [], "the owner ran its handler for a record a successor had taken over"
    settled = successor_store.load("tenant-a", key)
    assert settled is not None and settled.record.executor_id == "successor"
    if successor == "finalized":
        assert answers[0].replayed is False and answers[0].status == 201  # the successor's run
        assert (answer.status, answer.summary, answer.replayed) == (201, answers[0].summary, True)
        assert settled.record.status is RecordStatus.FINALIZED
        assert committed_keys(engine) == [f"tenant-a/{key}"]
    else:
        assert (answer.status, answer.problem_type) == (409, "idempotency_in_progress")
        assert settled.record.status is RecordStatus.IN_PROGRESS  # the successor's, untouched
        assert committed_keys(engine) == []


def test_lost_ownership_is_visible_to_a_running_handler(adapter: Any) -> None:
    """A handler whose lease keeper learns the reservation was taken over sees ``ctx.lost`` and can stop
    before its irreversible step."""
    key = str(uuid.uuid4())
    owner_store = IdempotencyStore(adapter, lease=timedelta(seconds=30))
    successor_store = IdempotencyStore(adapter, clock=later(10))
    taken_over = threading.Event()
    seen: list[bool] = []

    def handler(ctx: OwnerContext) -> HandlerResult:
        taken_over.wait(60)
        while not ctx.lost and ctx.keeper.heartbeats < 100:
            threading.Event().wait(0.02)
        seen.append(ctx.lost)
        return HandlerResult(503)

    owner = threading.Thread(
        target=run_idempotent,
        args=(owner_store, commit_request(key), handler),
        kwargs={"policy": Policy(heartbeat_s=0.05)},
    )
    owner.start()
    while owner_store.load("tenant-a", key) is None:
        threading.Event().wait(0.01)
    # The owner's heartbeat renews the lease (a CAS) every 50 ms, so a takeover may lose to it: the
    # successor reads again and retries, as a real one does; it wins within a few tries.
    taken = None
    for _ in range(50):
        claim = successor_store.reserve(
            "tenant-a",
            key,
            operation="commit",
            resource="table/orders",
            fingerprint=owner_store.load("tenant-a", key).record.fingerprint,  # type: ignore[union-attr]
        )
        taken = successor_store.takeover(claim)  # type: ignore[arg-type]
        if taken is not None:
            break
    assert taken is not None
    taken_over.set()
    owner.join(60)
    assert seen == [True]


class PlantedBug:
    """Delegates to an adapter but breaks one conditional write, to show the checks above catch it:
    ``write_if_absent`` that always writes, or ``write_if_match`` that ignores the token."""

    def __init__(self, inner: Any, broken: str) -> None:
        self.inner, self.broken = inner, broken

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_if_absent(self, key: str, data: bytes) -> str | None:
        if self.broken == "write_if_absent":
            return self.inner.write(key, data)
        return self.inner.write_if_absent(key, data)

    def write_if_match(self, key: str, data: bytes, token: str) -> str | None:
        if self.broken == "write_if_match":
            return self.inner.write(key, data)
        return self.inner.write_if_match(key, data, token)


def test_checker_catches_a_reserve_that_is_not_first_writer_wins(adapter: Any) -> None:
    broken = PlantedBug(adapter, "write_if_absent")
    key = str(uuid.uuid4())
    outcomes = [race_effect(broken, key, f"c{i}") for i in range(3)]
    with pytest.raises(AssertionError, match="side effect ran 3 times"):
        assert_exactly_once(adapter, outcomes, 3)


def test_checker_catches_an_unfenced_finalize(adapter: Any) -> None:
    key = str(uuid.uuid4())
    owner_store = IdempotencyStore(PlantedBug(adapter, "write_if_match"), lease=timedelta(seconds=30))
    successor_store = IdempotencyStore(adapter, clock=later(10))
    owned = owner_store.reserve("r", key, operation="op", resource="x", fingerprint="f")
    owned = owner_store.heartbeat(owned).owned  # type: ignore[arg-type, union-attr]  # caches a token
    stale = successor_store.reserve("r", key, operation="op", resource="x", fingerprint="f")
    successor = successor_store.takeover(stale)  # type: ignore[arg-type]
    assert successor is not None
    successor_store.finalize(successor, http_status=201, summary="successor's")
    settled = successor_store.load("r", key)
    owner_store.finalize(owned, http_status=201, summary="stale owner's", error_subtype=None)  # type: ignore[arg-type]
    assert successor_store.load("r", key) != settled  # the planted bug overwrote the successor's outcome
