"""``storage-adapter chaos``: a seeded chaos campaign against the idempotency layer and the commit engine.

Many concurrent logical requests, each one Idempotency-Key and one payload that appends one row (its unique
request id) to a table through ``Engine.commit(..., CommitRequest(idempotency_key=ctx.commit_key))`` inside
``run_idempotent`` with an ``EngineReconciler``. Each request is retried (same key, same payload) until it
gets a definite answer or its retry budget ends, while the campaign injects, at points chosen from the
seed: owner crashes before/after the commit (and inside it, at every engine failpoint) and before/after
finalize, in-process (the handler raising, or the owner abandoning the record) and, on stores shared
across processes, a real ``kill -9`` of a worker subprocess; tiny leases and skewed owner clocks; slow
reconcilers and stalled handlers; storage faults of every error class at every step
(``storage_adapter.faults``) and engine failpoint errors; concurrent duplicates; manifest retention
pressure (a small ``EngineSettings.retention`` and a stream of unrelated commits); concurrent recovery
(``Engine.heal`` from another thread, itself crashed at recovery failpoints) and a concurrent purger.

The oracle counts effects per key from the table (rows per request id) and checks every answer against
them: no double effect, no lost acknowledged effect, no 2xx answer that differs from another for the same
key, no record left IN_PROGRESS past its lease, no raw exception out of ``run_idempotent`` (other than the
handler's own, re-raised as documented), no 4xx for a request that was well-formed.

Reproducibility: every injected choice comes from ``random.Random(f"{seed}:{index}")`` for request
``index`` (and ``f"{seed}:heal:{round}"`` for the healer): the schedule is a function of the seed and the
configuration only, printed per violation and digested (``schedule_digest``). Thread interleavings are
not reproducible; the injected schedule is. See docs/idempotency.md, "Chaos campaign".
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from storage_adapter.adapter import open_adapter
from storage_adapter.engine import (
    CommitRequest,
    CorruptSidecarError,
    Engine,
    EngineSettings,
    RecoveryInvariantError,
    TableExistsError,
    failpoints,
)
from storage_adapter.engine.failpoints import COMMIT_POINTS, RECOVERY_POINTS, InjectedFault, SimulatedCrash
from storage_adapter.faults import FaultKind, FaultPlan, injected
from storage_adapter.idempotency import (
    HandlerResult,
    IdempotencyRecord,
    IdempotencyStore,
    IdempotentRequest,
    OwnerContext,
    Policy,
    Reconciliation,
    RecordStatus,
    Response,
    run_idempotent,
)
from storage_adapter.idempotency.engine_reconciler import EngineReconciler
from storage_adapter.idempotency.responses import RECONCILE_FAILED
from storage_adapter.idempotency.store import Owned, Transition
from storage_adapter.protocol import StorageAdapter

REALM = "chaos"
TABLE = "chaos"
TABLES = 8  # requests append to chaos0..chaos7 (request index modulo): a table version lists every fragment
NOISE_TABLE = "noise"
SCHEMA = pa.schema([("request_id", pa.string()), ("key", pa.string())])
NOISE_SCHEMA = pa.schema([("n", pa.int64())])
TARGETS = ("memory", "local", "seaweedfs")
# Per target: (a worker process can be killed -9 and the store survives, the driver can panic). A Rust
# panic can only happen inside obstore; the local driver has none to inject.
TARGET_TRAITS = {"memory": (False, True), "local": (True, False), "seaweedfs": (True, True)}
# Where an owner dies: in its handler before the commit, inside Engine.commit at each protocol step, after
# the commit returned, and around the idempotency store's finalize.
OWNER_POINTS = ("before_commit", *COMMIT_POINTS, "after_commit", "before_finalize", "after_finalize")
# Engine failpoints that fail a commit with an InjectedFault (a StorageError) instead of crashing it.
ENGINE_ERROR_POINTS = (
    *COMMIT_POINTS,
    "recovery.sidecar_write",
    "recovery.sidecar_delete",
    "recovery.sidecar_list",
)
ALL_KINDS = (FaultKind.UNAVAILABLE, FaultKind.DENIED, FaultKind.BROKEN, FaultKind.PANIC)
NATIVE_KINDS = (FaultKind.UNAVAILABLE, FaultKind.DENIED, FaultKind.BROKEN)

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2


# -- configuration and schedule -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChaosConfig:
    """Everything the schedule depends on, besides the seed. Times in seconds."""

    requests: int = 200
    workers: int = 8
    retries: int = 6  # attempts of a logical request before the client gives up (then clean retries)
    lease_s: float = 0.3  # the idempotency lease: tiny, so leases expire mid-request
    skew_grace_s: float = 0.2  # skew tolerated by the store; owners' clocks are skewed within it
    lifetime_s: float = 20.0  # record lifetime; the purger deletes expired records meanwhile
    retention: int = 12  # EngineSettings.retention: commit records (and keys) kept in the manifest
    noise_interval_s: float = 0.01  # one unrelated commit per interval (retention pressure)
    heal_interval_s: float = 0.05  # concurrent Engine.heal from another thread
    purge_interval_s: float = 1.0
    kill9_rate: float = 0.01  # share of crashing attempts that kill -9 a worker process (shared stores)
    kill9: bool = True  # the target is shared across processes (set from the adapter's capabilities)
    panics: bool = True  # the target's driver can panic (obstore); False for the local driver
    crash_rate: float = 0.3
    storage_fault_rate: float = 0.3
    engine_error_rate: float = 0.1
    slow_reconcile_rate: float = 0.15
    stall_rate: float = 0.1
    hedge_rate: float = 0.15

    @property
    def lease_window_s(self) -> float:
        return self.lease_s + self.skew_grace_s


@dataclass(frozen=True)
class Attempt:
    """One try of a logical request, and what is injected into it."""

    wait_s: float  # the client's backoff before sending it
    skew_s: float  # the owner's clock offset
    crash: str | None = None  # an OWNER_POINTS entry
    crash_mode: str = "abandon"  # abandon (no cleanup: the process died) | raise (the handler raises) | kill9
    fault: tuple[str, int, int] | None = None  # storage fault: (FaultKind value, steps to skip, times)
    engine_error: tuple[str, int] | None = None  # (failpoint, hits to skip): raises InjectedFault
    slow_reconcile_s: float = 0.0
    stall_s: float = 0.0  # the handler stalls before committing (a slow, live owner)
    hedge_s: float | None = None  # a concurrent duplicate is sent this long after the attempt

    def describe(self) -> str:
        parts = [f"wait={self.wait_s:.3f}", f"skew={self.skew_s:+.3f}"]
        if self.crash:
            parts.append(f"crash={self.crash}/{self.crash_mode}")
        if self.fault:
            parts.append(f"fault={self.fault[0]}@{self.fault[1]}x{self.fault[2]}")
        if self.engine_error:
            parts.append(f"engine_error={self.engine_error[0]}@{self.engine_error[1]}")
        if self.slow_reconcile_s:
            parts.append(f"slow_reconcile={self.slow_reconcile_s:.3f}")
        if self.stall_s:
            parts.append(f"stall={self.stall_s:.3f}")
        if self.hedge_s is not None:
            parts.append(f"hedge_after={self.hedge_s:.3f}")
        return " ".join(parts)


@dataclass(frozen=True)
class RequestPlan:
    index: int
    key: str
    request_id: str
    attempts: tuple[Attempt, ...]

    def describe(self) -> list[str]:
        return [f"#{self.index} key={self.key} request_id={self.request_id}"] + [
            f"  attempt {n}: {a.describe()}" for n, a in enumerate(self.attempts)
        ]


def request_rng(seed: int, index: int) -> random.Random:
    """The one source of randomness of request ``index``: a function of the seed and the index only."""
    return random.Random(f"{seed}:{index}")


def plan_request(seed: int, index: int, config: ChaosConfig) -> RequestPlan:
    """The injected schedule of request ``index``: a pure function of (seed, index, config)."""
    rng = request_rng(seed, index)
    key = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    kinds = ALL_KINDS if config.panics else NATIVE_KINDS
    attempts = []
    for n in range(config.retries):
        crash = rng.choice(OWNER_POINTS) if rng.random() < config.crash_rate else None
        mode = "abandon"
        if crash is not None:
            if config.kill9 and rng.random() < config.kill9_rate:
                mode = "kill9"
            elif crash in ("before_commit", "after_commit", *COMMIT_POINTS) and rng.random() < 0.4:
                mode = "raise"
        fault = None
        if rng.random() < config.storage_fault_rate:
            kind = rng.choice(kinds)
            fault = (kind.value, rng.randrange(40), rng.choice((1, 1, 1, 2, 5)))
        engine_error = None
        if rng.random() < config.engine_error_rate:
            engine_error = (rng.choice(ENGINE_ERROR_POINTS), rng.randrange(2))
        slow = rng.uniform(0.5, 2.0) * config.lease_s if rng.random() < config.slow_reconcile_rate else 0.0
        stall = rng.uniform(0.5, 3.0) * config.lease_s if rng.random() < config.stall_rate else 0.0
        hedge = rng.uniform(0.0, 2.0) * config.lease_s if rng.random() < config.hedge_rate else None
        wait = 0.0 if n == 0 else rng.uniform(0.0, 1.5) * config.lease_s
        skew = rng.uniform(-0.9, 0.9) * config.skew_grace_s
        if mode == "kill9":  # the worker process runs the attempt alone: no in-process injections in it
            fault, engine_error, hedge = None, None, None
        attempts.append(
            Attempt(
                round(wait, 4),
                round(skew, 4),
                crash,
                mode,
                fault,
                engine_error,
                round(slow, 4),
                round(stall, 4),
                None if hedge is None else round(hedge, 4),
            )
        )
    return RequestPlan(index, key, f"r{seed}-{index}", tuple(attempts))


def schedule(seed: int, config: ChaosConfig) -> list[RequestPlan]:
    return [plan_request(seed, index, config) for index in range(config.requests)]


class Described(Protocol):
    def describe(self) -> list[str]: ...


def schedule_digest(plans: Sequence[Described]) -> str:
    """SHA-256 (16 hex digits) of the printed schedule: equal digests, equal schedules."""
    text = "\n".join(line for plan in plans for line in plan.describe())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def heal_injection(seed: int, round_index: int) -> str | None:
    """The recovery failpoint the healer crashes at in heal round ``round_index`` (mostly none)."""
    rng = random.Random(f"{seed}:heal:{round_index}")
    return rng.choice(RECOVERY_POINTS) if rng.random() < 0.1 else None


# -- results --------------------------------------------------------------------------------------------------
@dataclass
class Answer:
    phase: str  # chaos | hedge | settle | replay
    attempt: int
    status: int | None  # None: no answer (crash, raised)
    summary: Any = None
    replayed: bool | None = None
    problem_type: str | None = None
    note: str = ""
    sent_s: float = 0.0  # when the attempt was sent, seconds into the campaign

    @property
    def acknowledged(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def definite(self) -> bool:
        if self.status is None:
            return False
        if self.status in (409, 503):
            return False
        return self.status < 500 or self.problem_type == RECONCILE_FAILED


@dataclass(frozen=True)
class Violation:
    kind: str  # double_effect | lost_ack | answer_mismatch | stuck | raw_exception | bad_4xx | heal_failed
    index: int | None
    key: str | None
    detail: str


class Plan(Protocol):
    """What the oracle and the report need of a logical request's plan (RequestPlan, HttpRequestPlan)."""

    @property
    def index(self) -> int: ...
    @property
    def key(self) -> str: ...
    @property
    def request_id(self) -> str: ...
    def describe(self) -> list[str]: ...


PlanT = TypeVar("PlanT", bound=Plan)


@dataclass
class RequestLog(Generic[PlanT]):
    plan: PlanT
    answers: list[Answer] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    gave_up: bool = False  # the client stopped without a clean last word (lifetime nearly over)


@dataclass
class CampaignResult:
    seed: int
    target: str
    url: str
    config: Any  # ChaosConfig, or HttpChaosConfig in the HTTP mode
    digest: str
    duration_s: float
    stats: dict[str, int]
    violations: list[Violation]
    logs: list[Any]  # RequestLog of either mode
    global_events: list[str]
    mode: str = ""  # "" in process; "--http" against the example service

    @property
    def ok(self) -> bool:
        return not self.violations

    def violation_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(v.kind for v in self.violations).items()))

    def replay_command(self) -> str:
        c = self.config
        return (
            f"storage-adapter chaos {self.mode + ' ' if self.mode else ''}--seed {self.seed} "
            f"--requests {c.requests} --target {self.target} --workers {c.workers}"
        )

    def render(self, max_violations: int = 20) -> str:
        lines = [
            f"chaos campaign: seed {self.seed}, target {self.target} ({self.url}), "
            f"{self.config.requests} requests, {self.config.workers} workers, schedule {self.digest}",
            f"finished in {self.duration_s:.1f} s; stats: {json.dumps(self.stats, sort_keys=True)}",
            f"violations: {len(self.violations)} {json.dumps(self.violation_counts())}",
        ]
        by_index = {log.plan.index: log for log in self.logs}
        for violation in self.violations[:max_violations]:
            lines.append("")
            lines.append(
                f"VIOLATION {violation.kind}: key {violation.key} (request #{violation.index}): "
                f"{violation.detail}"
            )
            log = by_index.get(violation.index) if violation.index is not None else None
            if log is not None:
                lines.append(" schedule:")
                lines += ["  " + line for line in log.plan.describe()]
                lines.append(" observed:")
                lines += ["   " + event for event in log.events]
        if len(self.violations) > max_violations:
            lines.append(f"... and {len(self.violations) - max_violations} more (see --report)")
        lines.append("")
        lines.append(f"replay: {self.replay_command()}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        bad = {v.index for v in self.violations}
        return {
            "seed": self.seed,
            "target": self.target,
            "url": self.url,
            "config": asdict(self.config),
            "schedule_digest": self.digest,
            "duration_s": round(self.duration_s, 3),
            "stats": self.stats,
            "violation_counts": self.violation_counts(),
            "violations": [asdict(v) for v in self.violations],
            "replay": self.replay_command(),
            "global_events": self.global_events,
            "requests": [
                {
                    "index": log.plan.index,
                    "key": log.plan.key,
                    "schedule": log.plan.describe(),
                    "events": log.events,
                    "answers": [asdict(a) for a in log.answers],
                }
                for log in self.logs
                if log.plan.index in bad
            ],
        }


# -- injection machinery --------------------------------------------------------------------------------------
class OwnerCrash(SimulatedCrash):
    """The owner "died" at an injected point (in-process): nothing after it runs for this attempt."""


_local = threading.local()


class _Owner:
    """Per-attempt injection state, reachable from the engine's failpoints through a thread-local."""

    def __init__(self, attempt: Attempt, on_crash: Callable[[str], None]) -> None:
        self.attempt = attempt
        self.on_crash = on_crash
        self.crashed_at: str | None = None
        self.error_hits = 0
        self.handler_error: BaseException | None = None

    def point(self, name: str) -> None:
        if self.crashed_at is None and name == self.attempt.crash:
            self.crashed_at = name
            self.on_crash(name)
        error = self.attempt.engine_error
        if error is not None and name == error[0]:
            self.error_hits += 1
            if self.error_hits == error[1] + 1:
                raise InjectedFault(f"chaos: injected engine error at {name!r}", key=name)


def _dispatch(name: str) -> None:
    """Armed on every engine failpoint: acts for the thread's current owner or healer only."""
    owner: _Owner | None = getattr(_local, "owner", None)
    if owner is not None:
        owner.point(name)
    heal_crash: str | None = getattr(_local, "heal_crash", None)
    if heal_crash is not None and heal_crash == name:
        _local.heal_crash = None
        raise SimulatedCrash(f"chaos: healer crashed at {name}")


@contextlib.contextmanager
def _failpoints_dispatched() -> Iterator[None]:
    for name in (
        *COMMIT_POINTS,
        *RECOVERY_POINTS,
        "recovery.sidecar_write",
        "recovery.sidecar_delete",
        "recovery.sidecar_list",
    ):
        failpoints.arm(name, _dispatch)
    try:
        yield
    finally:
        failpoints.disarm()


class ChaosStore(IdempotencyStore):
    """The store an owner uses: dies around finalize when told to; once dead, writes nothing more."""

    def __init__(self, adapter: StorageAdapter, owner: _Owner | None, **kwargs: Any) -> None:
        super().__init__(adapter, **kwargs)
        self.owner = owner
        self.dead = False

    def _point(self, name: str) -> None:
        if self.dead:
            raise OwnerCrash("chaos: the owner is dead")
        if self.owner is not None:
            self.owner.point(name)

    def finalize(self, owned: Any, **kwargs: Any) -> Any:
        self._point("before_finalize")
        result = super().finalize(owned, **kwargs)
        self._point("after_finalize")
        return result

    def cancel(self, owned: Owned, *, error_subtype: str | None = None) -> Transition:
        if self.dead:
            raise OwnerCrash("chaos: the owner is dead")
        return super().cancel(owned, error_subtype=error_subtype)


class _SlowReconciler:
    def __init__(self, inner: EngineReconciler, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    def reconcile(self, record: IdempotencyRecord) -> Reconciliation:
        time.sleep(self.delay_s)
        return self.inner.reconcile(record)


def describe_commit(commit: Any) -> HandlerResult:
    """The response of a commit request, from the engine's Commit or its CommitRecord."""
    return HandlerResult(201, {"version": commit.version})


def make_store(
    adapter: StorageAdapter, config: ChaosConfig, skew_s: float, owner: _Owner | None, executor: str
) -> ChaosStore:
    """The store as one owner sees it: its own (skewed) clock, the campaign's tiny lease. No per-call
    deadline: store requests then run in the caller's thread, where the injected storage faults are."""
    offset = timedelta(seconds=skew_s)
    return ChaosStore(
        adapter.child("store"),
        owner,
        lifetime=timedelta(seconds=config.lifetime_s),
        lease=timedelta(seconds=config.lease_s),
        clock=lambda: datetime.now(UTC) + offset,
        skew_grace=timedelta(seconds=config.skew_grace_s),
        call_timeout=None,
        executor_id=executor,
    )


def table_of(plan: RequestPlan) -> str:
    return f"{TABLE}{plan.index % TABLES}"


def request_of(plan: RequestPlan) -> IdempotentRequest:
    return IdempotentRequest(
        REALM, plan.key, "append", f"table/{table_of(plan)}", {"request_id": plan.request_id}
    )


def open_engine(adapter: StorageAdapter, config: ChaosConfig, actor: str) -> Engine:
    settings = EngineSettings(retention=config.retention, lease_s=2.0, max_attempts=64)
    return Engine.open(adapter.child("engine"), actor=actor, settings=settings)


def make_handler(
    engine: Engine,
    plan: RequestPlan,
    owner: _Owner | None,
    stall_s: float,
    on_start: Callable[[], None] = lambda: None,
    on_end: Callable[[], None] = lambda: None,
    counter: Callable[[str, int], None] = lambda name, n: None,
) -> Callable[[OwnerContext], HandlerResult]:
    rows = pa.table({"request_id": [plan.request_id], "key": [plan.key]}, schema=SCHEMA)

    def handler(ctx: OwnerContext) -> HandlerResult:
        on_start()
        try:
            if owner is not None:
                owner.point("before_commit")
            if stall_s:
                time.sleep(stall_s)
            commit = engine.commit(
                {table_of(plan): rows},
                CommitRequest(idempotency_key=ctx.commit_key, key_issued_at=ctx.key_issued_at),
            )
            if commit.attempts > 1:
                counter("commit_retries", commit.attempts - 1)
            if owner is not None:
                owner.point("after_commit")
            return describe_commit(commit)
        except BaseException as exc:
            if owner is not None:
                owner.handler_error = exc
            raise
        finally:
            on_end()

    return handler


def chaos_policy(config: ChaosConfig, settle: bool = False) -> Policy:
    """Short polls; a settling client waits long enough for any dead owner's lease to go stale."""
    total = (4.0 if settle else 1.5) * config.lease_window_s
    return Policy(first_wait_s=0.02, max_wait_s=0.1, total_wait_s=total, settle_attempts=2)


def _answer(phase: str, attempt: int, response: Response) -> Answer:
    return Answer(phase, attempt, response.status, response.summary, response.replayed, response.problem_type)


# -- the campaign ---------------------------------------------------------------------------------------------
class Campaign:
    def __init__(
        self, seed: int, config: ChaosConfig, url: str, options: dict[str, Any], target: str, workdir: Path
    ) -> None:
        self.seed = seed
        self.config = config
        self.url = url
        self.options = options
        self.target = target
        self.workdir = workdir
        self.adapter = open_adapter(url, **options)
        self.plans = schedule(seed, config)
        self.logs: list[RequestLog[RequestPlan]] = [RequestLog(plan) for plan in self.plans]
        self.stats: Counter[str] = Counter()
        self.global_events: list[str] = []
        self.heal_violations: list[Violation] = []
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._active_owners: Counter[str] = Counter()
        self._stop = threading.Event()

    def _t(self) -> str:
        return f"{time.monotonic() - self.started:8.3f}s"

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.stats[name] += n

    # -- background actors --------------------------------------------------------------------------------
    def _noise(self, engine: Engine) -> None:
        n = 0
        while not self._stop.wait(self.config.noise_interval_s):
            try:
                # An overwrite: the noise table stays one fragment, only the manifest's history moves.
                engine.commit(
                    {NOISE_TABLE: pa.table({"n": [n]}, schema=NOISE_SCHEMA)}, CommitRequest(mode="overwrite")
                )
                n += 1
            except Exception as exc:
                self._count("noise_errors")
                self.global_events.append(f"{self._t()} noise commit failed: {type(exc).__name__}: {exc}")
        self._count("noise_commits", n)

    def _healer(self, engine: Engine) -> None:
        round_index = 0
        while not self._stop.wait(self.config.heal_interval_s):
            crash = heal_injection(self.seed, round_index)
            _local.heal_crash = crash
            try:
                report = engine.heal()
                self._count("heal_recovered", len(report.recovered))
            except SimulatedCrash:
                self._count("heal_crashes")
                self.global_events.append(f"{self._t()} heal round {round_index}: crashed at {crash}")
            except (RecoveryInvariantError, CorruptSidecarError) as exc:
                self.heal_violations.append(
                    Violation("heal_failed", None, None, f"{type(exc).__name__}: {exc}")
                )
                self.global_events.append(
                    f"{self._t()} heal round {round_index}: {type(exc).__name__}: {exc}"
                )
            except Exception as exc:
                self._count("heal_errors")
                self.global_events.append(
                    f"{self._t()} heal round {round_index}: {type(exc).__name__}: {exc}"
                )
            finally:
                _local.heal_crash = None
            round_index += 1
        self._count("heal_rounds", round_index)

    def _purger(self) -> None:
        store = make_store(self.adapter, self.config, 0.0, None, "purger")
        while not self._stop.wait(self.config.purge_interval_s):
            try:
                self._count("purged", store.purge_expired(datetime.now(UTC)))
            except Exception as exc:
                self._count("purge_errors")
                self.global_events.append(f"{self._t()} purge: {type(exc).__name__}: {exc}")

    # -- one attempt --------------------------------------------------------------------------------------
    def _owner_hooks(self, log: RequestLog[RequestPlan]) -> tuple[Callable[[], None], Callable[[], None]]:
        key = log.plan.key

        def start() -> None:
            with self._lock:
                self._active_owners[key] += 1
                overlap = self._active_owners[key]
            if overlap > 1:
                self._count("overlapping_owners")
                log.events.append(f"{self._t()} {overlap} handlers of this key running at once")

        def end() -> None:
            with self._lock:
                self._active_owners[key] -= 1

        return start, end

    def _attempt(
        self, engine: Engine, log: RequestLog[RequestPlan], n: int, attempt: Attempt, phase: str
    ) -> Answer:
        plan = log.plan
        if attempt.crash_mode == "kill9" and attempt.crash is not None:
            return self._attempt_kill9(log, n, attempt)
        holder: dict[str, ChaosStore] = {}

        def on_crash(point: str) -> None:
            if attempt.crash_mode == "abandon" or point in ("before_finalize", "after_finalize"):
                holder["store"].dead = True
            raise OwnerCrash(f"chaos: owner crashed at {point}")

        owner = _Owner(attempt, on_crash)
        store = make_store(self.adapter, self.config, attempt.skew_s, owner, f"owner-{plan.index}-{n}")
        holder["store"] = store
        reconciler: Any = EngineReconciler(engine, describe_commit)
        if attempt.slow_reconcile_s:
            reconciler = _SlowReconciler(reconciler, attempt.slow_reconcile_s)
        start, end = self._owner_hooks(log)
        handler = make_handler(engine, plan, owner, attempt.stall_s, start, end, self._count)
        plan_fault = None
        if attempt.fault is not None:
            kind, skip, times = attempt.fault
            plan_fault = FaultPlan(FaultKind(kind), skip=skip, times=times)
        _local.owner = owner
        try:
            with injected(plan_fault) if plan_fault is not None else contextlib.nullcontext():
                response = run_idempotent(
                    store, request_of(plan), handler, reconciler=reconciler, policy=chaos_policy(self.config)
                )
            answer = _answer(phase, n, response)
        except OwnerCrash as exc:
            answer = Answer(phase, n, None, note=f"crashed: {exc}")
        except BaseException as exc:
            if exc is owner.handler_error:
                answer = Answer(
                    phase, n, None, note=f"handler raised (re-raised): {type(exc).__name__}: {exc}"
                )
            else:
                text = f"{type(exc).__name__}: {exc}"
                log.raw.append(f"attempt {n} ({phase}): {text}")
                answer = Answer(phase, n, None, note=f"RAW EXCEPTION {text}")
                if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
                    raise
        finally:
            _local.owner = None
        if plan_fault is not None:
            self._count("storage_faults_fired", len(plan_fault.fired))
            if plan_fault.fired:
                log.events.append(
                    f"{self._t()} attempt {n}: storage fault {attempt.fault[0]} fired at "  # type: ignore[index]
                    f"{plan_fault.fired}"
                )
        if owner.crashed_at is not None:
            self._count(f"crash:{owner.crashed_at}")
        return answer

    def _attempt_kill9(self, log: RequestLog[RequestPlan], n: int, attempt: Attempt) -> Answer:
        plan = log.plan
        marker = self.workdir / f"kill9-{plan.index}-{n}"
        spec = {
            "url": self.url,
            "options": self.options,
            "config": asdict(self.config),
            "key": plan.key,
            "request_id": plan.request_id,
            "index": plan.index,
            "attempt": n,
            "crash": attempt.crash,
            "skew_s": attempt.skew_s,
            "marker": str(marker),
        }
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        env.pop(failpoints.ENV_VAR, None)
        errors = self.workdir / f"kill9-{plan.index}-{n}.stderr"
        with errors.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "contract_tests.chaos", "--worker"],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(spec).encode())  # the spec (options included) never touches disk
        process.stdin.close()
        killed = False
        deadline = time.monotonic() + 120
        while process.poll() is None:
            if marker.exists() or time.monotonic() > deadline:
                os.kill(process.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.02)
        out = process.stdout.read()
        process.stdout.close()
        process.wait()
        err = errors.read_bytes()
        self._count("kill9_workers")
        if killed:
            self._count(f"kill9:{attempt.crash}")
            log.events.append(f"{self._t()} attempt {n}: worker {process.pid} killed -9 at {attempt.crash}")
            return Answer("chaos", n, None, note=f"kill -9 at {attempt.crash}")
        try:
            result = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            log.raw.append(f"attempt {n}: worker exited {process.returncode}: {err.decode()[-500:]}")
            return Answer("chaos", n, None, note=f"RAW EXCEPTION worker exited {process.returncode}")
        log.events.append(f"{self._t()} attempt {n}: worker finished before {attempt.crash}: {result}")
        if "raw" in result:
            log.raw.append(f"attempt {n} (worker): {result['raw']}")
            return Answer("chaos", n, None, note=f"RAW EXCEPTION {result['raw']}")
        if "raised" in result:
            return Answer("chaos", n, None, note=f"handler raised (re-raised): {result['raised']}")
        return Answer(
            "chaos", n, result["status"], result["summary"], result["replayed"], result["problem_type"]
        )

    def _clean(self, engine: Engine, log: RequestLog[RequestPlan], n: int, phase: str) -> Answer:
        """An attempt with nothing injected and a patient client (settle, replay, hedge)."""
        plan = log.plan
        owner = _Owner(Attempt(0.0, 0.0), lambda point: None)  # injects nothing; sees the handler's errors
        store = make_store(self.adapter, self.config, 0.0, None, f"{phase}-{plan.index}-{n}")
        start, end = self._owner_hooks(log)
        handler = make_handler(engine, plan, owner, 0.0, start, end, self._count)
        try:
            response = run_idempotent(
                store,
                request_of(plan),
                handler,
                reconciler=EngineReconciler(engine, describe_commit),
                policy=chaos_policy(self.config, settle=phase != "hedge"),
            )
            return _answer(phase, n, response)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if exc is owner.handler_error:
                return Answer(phase, n, None, note=f"handler raised (re-raised): {text}")
            log.raw.append(f"attempt {n} ({phase}): {text}")
            return Answer(phase, n, None, note=f"RAW EXCEPTION {text}")

    # -- one logical request ------------------------------------------------------------------------------
    def _record(self, log: RequestLog[RequestPlan], answer: Answer) -> None:
        record_answer(log, answer, self._t())
        self._count(f"answers:{answer.phase}:{answer.status if answer.status is not None else 'none'}")

    def _request(self, engine: Engine, log: RequestLog[RequestPlan]) -> None:
        first_sent = time.monotonic()
        guard = self.config.lifetime_s - 4 * self.config.lease_window_s  # never retry past the lifetime
        definite = False
        hedges: list[threading.Thread] = []
        for n, attempt in enumerate(log.plan.attempts):
            time.sleep(attempt.wait_s)
            if time.monotonic() - first_sent > guard:
                log.events.append(f"{self._t()} client stops: the key's lifetime is nearly over")
                self._count("clients_stopped_by_lifetime")
                break
            if attempt.hedge_s is not None:
                hedge = threading.Thread(
                    target=self._hedge, args=(engine, log, n, attempt.hedge_s), daemon=True
                )
                hedge.start()
                hedges.append(hedge)
            self._count("attempts")
            sent = time.monotonic() - self.started
            answer = replace(self._attempt(engine, log, n, attempt, "chaos"), sent_s=sent)
            self._record(log, answer)
            if answer.definite:
                definite = True
                break
        for hedge in hedges:
            hedge.join()
        # The client's last word: clean retries (the lease of a dead owner expires meanwhile), then a replay.
        for n in range(3):
            if definite or time.monotonic() - first_sent > guard:
                break
            time.sleep(self.config.lease_window_s)
            sent = time.monotonic() - self.started
            answer = replace(self._clean(engine, log, n, "settle"), sent_s=sent)
            self._record(log, answer)
            definite = answer.definite
        if definite and time.monotonic() - first_sent <= guard:
            sent = time.monotonic() - self.started
            self._record(log, replace(self._clean(engine, log, 0, "replay"), sent_s=sent))
        else:
            log.gave_up = True

    def _hedge(self, engine: Engine, log: RequestLog[RequestPlan], n: int, delay_s: float) -> None:
        time.sleep(delay_s)
        self._count("hedges")
        sent = time.monotonic() - self.started
        self._record(log, replace(self._clean(engine, log, n, "hedge"), sent_s=sent))

    # -- run and judge ------------------------------------------------------------------------------------
    def run(self) -> CampaignResult:
        engine = open_engine(self.adapter, self.config, "chaos-owners")
        tables = [(f"{TABLE}{i}", SCHEMA) for i in range(TABLES)] + [(NOISE_TABLE, NOISE_SCHEMA)]
        for table, schema in tables:
            with contextlib.suppress(TableExistsError):
                engine.create_table(table, schema)
        healer_engine = open_engine(self.adapter, self.config, "chaos-healer")
        background = [
            threading.Thread(target=self._noise, args=(engine,), name="chaos-noise", daemon=True),
            threading.Thread(target=self._healer, args=(healer_engine,), name="chaos-healer", daemon=True),
            threading.Thread(target=self._purger, name="chaos-purger", daemon=True),
        ]
        with _failpoints_dispatched():
            for thread in background:
                thread.start()
            try:
                with ThreadPoolExecutor(self.config.workers, thread_name_prefix="chaos-client") as pool:
                    for future in [pool.submit(self._request, engine, log) for log in self.logs]:
                        future.result()
            finally:
                self._stop.set()
                for thread in background:
                    thread.join()
        engine.heal()
        violations = self.judge(engine)
        return CampaignResult(
            self.seed,
            self.target,
            self.url,
            self.config,
            schedule_digest(self.plans),
            time.monotonic() - self.started,
            dict(sorted(self.stats.items())),
            violations,
            self.logs,
            self.global_events,
        )

    def judge(self, engine: Engine) -> list[Violation]:
        """The oracle: effects per key from the table, against every answer and the final records."""
        rows, key_of_version = effects_of(engine, [f"{TABLE}{i}" for i in range(TABLES)])
        store = make_store(self.adapter, self.config, 0.0, None, "oracle")
        grace = timedelta(seconds=self.config.skew_grace_s)
        return self.heal_violations + judge(self.logs, rows, key_of_version, store, REALM, grace)


def record_answer(log: RequestLog[Any], answer: Answer, when: str) -> None:
    """Add ``answer`` to the request's log and its timeline (``when``: the time into the campaign)."""
    log.answers.append(answer)
    shown = answer.note or f"{answer.status} {json.dumps(answer.summary)} replayed={answer.replayed}"
    if answer.status is not None and answer.note == "":
        shown = f"{answer.status} {answer.problem_type or ''} {json.dumps(answer.summary)} replayed={answer.replayed}"
    log.events.append(f"{when} {answer.phase} attempt {answer.attempt} (sent {answer.sent_s:.3f}s): {shown}")


def effects_of(engine: Engine, tables: Sequence[str]) -> tuple[Counter[str], dict[int, str | None]]:
    """What happened, read once at the end: rows per request id in ``tables``, and the idempotency key
    each retained commit carries, by manifest version."""
    snapshot = engine.snapshot()
    rows: Counter[str] = Counter()
    for table in tables:
        rows.update(engine.read(table, snapshot).column("request_id").to_pylist())
    return rows, {record.version: record.idempotency_key for record in engine.history()}


def judge(
    logs: Sequence[RequestLog[Any]],
    rows: Counter[str],
    key_of_version: dict[int, str | None],
    store: IdempotencyStore,
    realm: str,
    grace: timedelta,
) -> list[Violation]:
    """The oracle, for the in-process campaign and its HTTP mode alike: every logical request's answers
    against its effects (``rows``: rows per request id), the commits' keys (``key_of_version``) and its
    final record in ``store`` (a record is stale ``grace`` after its lease)."""
    now = datetime.now(UTC)
    violations: list[Violation] = []
    for log in logs:
        plan = log.plan

        def bad(kind: str, detail: str, plan: Plan = plan) -> None:
            violations.append(Violation(kind, plan.index, plan.key, detail))

        effects = rows.get(plan.request_id, 0)
        acks = [a for a in log.answers if a.acknowledged]
        if effects > 1:
            bad("double_effect", f"request id {plan.request_id} is in the table {effects} times")
        if acks and effects == 0:
            bad("lost_ack", f"answered {acks[0].status} {_short(acks[0].summary)} but no row was committed")
        if len({json.dumps([a.status, a.summary], sort_keys=True) for a in acks}) > 1:
            shown = [f"{a.phase}#{a.attempt}:{a.status} {_short(a.summary)}" for a in acks]
            bad("answer_mismatch", f"2xx answers differ: {shown}")
        for answer in acks:
            version = answer.summary.get("version") if isinstance(answer.summary, dict) else None
            if not isinstance(version, int) or version not in key_of_version:
                continue
            carried = key_of_version[version]  # ctx.commit_key: "realm/key@<reservation's creation time>"
            if carried is None or carried.rsplit("@", 1)[0] != f"{realm}/{plan.key}":
                bad("answer_mismatch", f"answered version {version}, whose commit carries key {carried!r}")
        for answer in log.answers:
            if answer.status in (400, 422):
                bad(
                    "bad_4xx",
                    f"{answer.phase} attempt {answer.attempt} answered {answer.status} "
                    f"{answer.problem_type} to a well-formed retry",
                )
        for raw in log.raw:
            bad("raw_exception", raw)
        try:
            stored = store.load(realm, plan.key)
        except Exception as exc:
            bad("stuck", f"record unreadable at the end: {type(exc).__name__}: {exc}")
            continue
        if stored is not None:
            record = stored.record
            # A client that gave up may leave a dead owner's record behind: the next duplicate would
            # take it over. Stuck is a record still in progress after the client's clean last word.
            expired = now > record.lease_expires_at + grace
            if record.status is RecordStatus.IN_PROGRESS and expired and not log.gave_up:
                bad(
                    "stuck", f"IN_PROGRESS at the end, lease expired at {record.lease_expires_at.isoformat()}"
                )
            finalized_2xx = (
                record.status is RecordStatus.FINALIZED
                and record.http_status is not None
                and 200 <= record.http_status < 300
            )
            if finalized_2xx and acks and stored_answer(record, store) != acks[0].summary:
                bad(
                    "answer_mismatch",
                    f"stored outcome {record.http_status} {_short(record.summary)} differs from the answer "
                    f"{_short(acks[0].summary)}",
                )
        if not any(a.definite for a in log.answers) and log.answers and log.answers[-1].phase == "settle":
            bad("stuck", "no definite answer even from clean retries after the lease expired")
    return violations


def stored_answer(record: IdempotencyRecord, store: IdempotencyStore) -> Any:
    """The answer a finalized record replays, as the client reads it: the summary, or the JSON body of
    an HTTP response stored by the middleware (``{"body": ...}`` in the record, or its attachment)."""
    summary = record.summary
    body: str | bytes | None = None
    if isinstance(summary, dict) and set(summary) == {"body"} and isinstance(summary["body"], str):
        body = summary["body"]
    elif record.attachment is not None:
        body = store.attachment(record)
    if body is not None:
        with contextlib.suppress(ValueError):
            return json.loads(body)
    return summary


def _short(value: Any, limit: int = 300) -> str:
    """``value`` as a violation shows it: an Iceberg-size answer cut to ``limit`` characters."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# -- targets --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def target_url(target: str, run: str) -> Iterator[str]:
    """A fresh root for ``target``: memory, a temporary directory, or a SeaweedFS started here (its
    ``AWS_*`` environment set for the duration, so worker processes inherit it)."""
    if target == TARGETS[0]:
        yield f"memory://chaos-{run}"
    elif target == TARGETS[1]:
        with tempfile.TemporaryDirectory(prefix="storage-adapter-chaos-") as root:
            yield f"file://{root}"
    else:
        from storage_adapter.servers.registry import provider

        with provider("seaweedfs")(bucket="chaos") as endpoint, endpoint.scoped():
            yield endpoint.url(f"chaos-{run}")


def run_campaign(
    seed: int, config: ChaosConfig, url: str, target: str, options: dict[str, Any] | None = None
) -> CampaignResult:
    """Run one campaign against the empty root ``url`` of ``target`` (one of TARGETS, whose traits set the
    configuration's kill9 and panics flags)."""
    config = for_target(config, target)
    with tempfile.TemporaryDirectory(prefix="chaos-markers-") as workdir:
        return Campaign(seed, config, url, dict(options or {}), target, Path(workdir)).run()


def for_target(config: ChaosConfig, target: str) -> ChaosConfig:
    kill9, panics = TARGET_TRAITS[target]
    return replace(config, kill9=config.kill9 and kill9, panics=config.panics and panics)


# -- the kill -9 worker ---------------------------------------------------------------------------------------
def worker_main(spec: dict[str, Any]) -> None:
    """One attempt in its own process; at the crash point it writes the marker and waits for SIGKILL."""
    config = ChaosConfig(**spec["config"])
    adapter = open_adapter(spec["url"], **spec["options"])
    marker = Path(spec["marker"])

    def pause(point: str) -> None:
        marker.write_text(point)
        while True:
            time.sleep(60)

    attempt = Attempt(0.0, spec["skew_s"], spec["crash"], "kill9")
    owner = _Owner(attempt, pause)
    store = make_store(adapter, config, spec["skew_s"], owner, f"worker-{spec['index']}-{spec['attempt']}")
    engine = open_engine(adapter, config, f"chaos-worker-{os.getpid()}")
    plan = RequestPlan(spec["index"], spec["key"], spec["request_id"], ())
    for name in COMMIT_POINTS:
        failpoints.arm(name, _dispatch)
    _local.owner = owner
    try:
        response = run_idempotent(
            store,
            request_of(plan),
            make_handler(engine, plan, owner, 0.0),
            reconciler=EngineReconciler(engine, describe_commit),
            policy=chaos_policy(config),
        )
        result: dict[str, Any] = {
            "status": response.status,
            "summary": response.summary,
            "replayed": response.replayed,
            "problem_type": response.problem_type,
        }
    except Exception as exc:
        key = "raised" if exc is owner.handler_error else "raw"
        result = {key: f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result), flush=True)


# -- command line ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="storage-adapter chaos",
        description="Seeded chaos campaign: concurrent retried idempotent commits under injected crashes, "
        "lease expiry, clock skew, storage faults, retention pressure and concurrent recovery, judged by "
        "an effect-counting oracle. Exit 0: no violation; 1: violations; 2: bad input.",
    )
    defaults = ChaosConfig()
    parser.add_argument("--seed", type=int, required=True, help="the schedule is a function of it")
    parser.add_argument("--requests", type=int, default=defaults.requests, help="logical requests")
    parser.add_argument("--target", choices=TARGETS, default=TARGETS[0])
    parser.add_argument("--workers", type=int, default=defaults.workers, help="concurrent clients")
    parser.add_argument("--retries", type=int, help=f"attempts per request ({defaults.retries}; --http: 8)")
    parser.add_argument("--retention", type=int, help=f"EngineSettings.retention ({defaults.retention})")
    parser.add_argument(
        "--lease", type=float, help=f"idempotency lease, seconds ({defaults.lease_s}; --http: 0.5)"
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="real HTTP: clients retry requests to the example catalog service (examples/catalog_service.py) "
        "in its own process, killed -9 and restarted; targets local and seaweedfs",
    )
    parser.add_argument(
        "--kill9-rate",
        type=float,
        default=defaults.kill9_rate,
        help="share of crashes that kill -9 a worker process (local, seaweedfs)",
    )
    parser.add_argument("--report", metavar="PATH", help="write the full JSON report here")
    parser.add_argument("--print-schedule", action="store_true", help="print the schedule and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        worker_main(json.loads(sys.stdin.read()))
        return 0
    args = build_parser().parse_args(argv)
    sizes = (args.requests, args.workers, args.retries or 1, args.retention or 1, args.lease or 1)
    if min(sizes) <= 0:
        print("storage-adapter chaos: error: sizes must be positive", file=sys.stderr)
        return EXIT_BAD_INPUT
    given = {"retries": args.retries, "retention": args.retention, "lease_s": args.lease}
    given = {name: value for name, value in given.items() if value is not None}
    if args.http:
        return _main_http(args, given)
    config = replace(
        ChaosConfig(), requests=args.requests, workers=args.workers, kill9_rate=args.kill9_rate, **given
    )
    if args.print_schedule:
        plans = schedule(args.seed, for_target(config, args.target))
        for plan in plans:
            print("\n".join(plan.describe()))
        print(f"schedule digest {schedule_digest(plans)}")
        return EXIT_OK
    with target_url(args.target, f"{args.seed}-{uuid.uuid4().hex[:8]}") as url:
        result = run_campaign(args.seed, config, url, args.target)
    return _report(result, args.report)


def _report(result: CampaignResult, path: str | None) -> int:
    print(result.render())
    if path:
        Path(path).write_text(json.dumps(result.to_json(), indent=2, default=str))
        print(f"report: {path}")
    return EXIT_OK if result.ok else EXIT_VIOLATIONS


def _main_http(args: argparse.Namespace, given: dict[str, Any]) -> int:
    from contract_tests import http_chaos  # needs httpx and a clone's examples/ (the [http] extra)

    if args.target not in http_chaos.HTTP_TARGETS:
        print(
            f"storage-adapter chaos: error: --http needs a store that outlives the server process: "
            f"--target {' or '.join(http_chaos.HTTP_TARGETS)}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    config = replace(http_chaos.HttpChaosConfig(), requests=args.requests, workers=args.workers, **given)
    if args.print_schedule:
        plans, generations = http_chaos.http_schedule(args.seed, config)
        described: list[Described] = [*plans, *generations]
        for item in described:
            print("\n".join(item.describe()))
        print(f"schedule digest {http_chaos.http_digest(plans, generations)}")
        return EXIT_OK
    with target_url(args.target, f"{args.seed}-{uuid.uuid4().hex[:8]}") as url:
        result = http_chaos.run_http_campaign(args.seed, config, url, args.target)
    return _report(result, args.report)


if __name__ == "__main__":
    raise SystemExit(main())
