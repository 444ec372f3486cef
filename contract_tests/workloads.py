"""Stress workloads for the linearizability checker, and runners for threads and OS processes.

A workload is a number of *rounds* over a small key set, each key alone under its own prefix (so that,
on stores with directories, deleting it removes its directory and the next write re-creates it). Every
worker runs the same rounds; round ``r`` has a hot key, ``keys[r % len(keys)]``:

1. (every third round) worker 0 deletes the hot key;         -> sync
2. every worker reads the hot key with ``read_versioned``;    -> sync
3. every worker tries to replace it: ``write_if_match`` with the token it just read, or
   ``write_if_absent`` if it was absent (after step 1: all of them at once, into an emptied prefix).
   All workers hold the same token, so exactly one may win;   -> sync
4. half the workers (alternating by round) ``write`` the hot key, the others poll it with ``read``
   ``reads_per_round`` times, ``read_spacing_s`` apart, catching any write that is visible half-done;
   in the rounds after a step-1 delete, the first poller deletes the hot key first, racing the writes;
5. ``random_ops`` random operations on random keys (read, read_versioned, exists, write,
   write_if_absent, write_if_match with the worker's latest - possibly stale - token, delete).

``sync`` is a barrier across all workers (``threading.Barrier``, a spawn-context
``multiprocessing.Barrier``, or a Spark barrier stage's ``BarrierTaskContext.barrier``); it makes each
contention phase a synchronized burst, so a planted race with a window of tens of milliseconds is hit
in every run, by design rather than by luck. Every worker calls ``sync`` exactly ``3 * rounds`` times
whatever happens, as Spark barrier stages require.

Every body is unique in the run and all bodies have the same length, so a token identifies a version on
every backend (S3 ETags are content MD5s) and a half-written body can never equal a whole one.
Operations that raise StorageError are recorded (see :mod:`contract_tests.history`: an error that is not
an outcome of the operation makes the history a violation) and the worker goes on.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from functools import partial

from contract_tests.history import Event, History, HistoryRecorder
from contract_tests.races import Sync, race_in_processes, race_in_threads
from storage_adapter.errors import StorageError
from storage_adapter.protocol import StorageAdapter

BODY_LENGTH = 64
_RANDOM_OPS = ("read", "read_versioned", "exists", "write", "write_if_absent", "write_if_match", "delete")
_RANDOM_WEIGHTS = (3, 3, 1, 2, 1, 3, 1)


@dataclass(frozen=True)
class WorkloadSpec:
    """The size and shape of a stress workload (see the module docstring). Each worker records about
    ``rounds * (3 + reads_per_round / 2 + random_ops)`` operations."""

    keys: int = 3
    rounds: int = 8
    random_ops: int = 6
    reads_per_round: int = 6
    read_spacing_s: float = 0.005
    seed: int = 0

    def key_names(self) -> list[str]:
        return [f"stress/k{i}/v" for i in range(self.keys)]


class _Worker:
    """One worker's run of the workload through its recorder."""

    def __init__(self, adapter: StorageAdapter, spec: WorkloadSpec, index: int, run_id: str, sync: Sync):
        self.store = HistoryRecorder(adapter, worker=f"w{index}")
        self.spec = spec
        self.index = index
        self.run_id = run_id
        self.sync = sync
        self.rng = random.Random(spec.seed * 1_000_003 + index)
        self.tokens: dict[str, str] = {}
        self.sequence = 0

    def body(self) -> bytes:
        self.sequence += 1
        text = f"{self.run_id}:w{self.index}:{self.sequence}:"
        return text.ljust(BODY_LENGTH, "~").encode()

    def create(self, key: str) -> None:
        """write_if_absent; a win's token is this worker's latest for ``key``, as a write's is."""
        token = self.store.write_if_absent(key, self.body())
        if token is not None:
            self.tokens[key] = token

    def attempt(self, op: str, key: str) -> None:
        """One recorded operation; storage errors are already in the history, so the worker goes on."""
        try:
            if op == "read":
                self.store.read_if_exists(key)
            elif op == "read_versioned":
                self.tokens[key] = self.store.read_versioned(key).token
            elif op == "exists":
                self.store.exists(key)
            elif op == "write":
                self.tokens[key] = self.store.write(key, self.body())
            elif op == "write_if_absent":
                self.create(key)
            elif op == "write_if_match":
                token = self.tokens.get(key)
                if token is None:
                    self.create(key)
                else:
                    new = self.store.write_if_match(key, self.body(), token)
                    if new is not None:
                        self.tokens[key] = new
            elif op == "delete":
                self.store.delete(key)
            else:
                raise ValueError(f"unknown workload operation {op!r}")
        except StorageError:
            pass

    def run(self) -> list[Event]:
        keys = self.spec.key_names()
        for round_ in range(self.spec.rounds):
            hot = keys[round_ % len(keys)]
            if round_ % 3 == 0 and self.index == 0:
                self.attempt("delete", hot)
            self.sync()
            self.tokens.pop(hot, None)
            self.attempt("read_versioned", hot)
            self.sync()
            self.attempt("write_if_match", hot)  # write_if_absent when the read found nothing
            self.sync()
            if (self.index + round_) % 2 == 0:
                self.attempt("write", hot)
            else:
                if round_ % 3 == 1 and self.index == 1 - round_ % 2:
                    self.attempt("delete", hot)  # the first poller: a delete racing the writes
                for _ in range(self.spec.reads_per_round):
                    self.attempt("read", hot)
                    time.sleep(self.spec.read_spacing_s)
            for _ in range(self.spec.random_ops):
                op = self.rng.choices(_RANDOM_OPS, _RANDOM_WEIGHTS)[0]
                self.attempt(op, self.rng.choice(keys))
        return self.store.events


def workload_task(
    adapter: StorageAdapter, spec: WorkloadSpec, run_id: str, index: int, sync: Sync
) -> list[Event]:
    """Racer ``index`` of the workload on ``adapter`` (a task for :mod:`contract_tests.races`); returns
    its recorded events. ``run_id`` is shared by the racers of one run and unique across runs (it makes
    bodies unique)."""
    return _Worker(adapter, spec, index, run_id, sync).run()


def new_run_id() -> str:
    return uuid.uuid4().hex[:10]


def require_shared_store(adapter: StorageAdapter, consequence: str) -> None:
    """Raise ValueError unless other processes see the same objects (memory stores are per-process)."""
    capabilities = adapter.capabilities
    if not capabilities.shared_across_processes:
        raise ValueError(
            f"{adapter!r}: a {capabilities.backend} store is per-process "
            f"(capabilities.shared_across_processes is False); {consequence}"
        )


def run_threads(adapter: StorageAdapter, spec: WorkloadSpec, workers: int = 4) -> History:
    """Run the workload in ``workers`` threads sharing ``adapter``; return the merged history.
    Raises RaceError if a worker crashes (its traceback in the message)."""
    return History.merge(*race_in_threads(workers, partial(workload_task, adapter, spec, new_run_id())))


def run_processes(
    adapter: StorageAdapter, spec: WorkloadSpec, workers: int = 4, timeout_s: float = 600.0
) -> History:
    """Run the workload in ``workers`` spawned OS processes, each reopening ``adapter`` by unpickling it;
    return the merged history. Raises ValueError when the adapter's store is not shared across processes
    (memory), and RaceError if a worker crashes or does not report within ``timeout_s``."""
    require_shared_store(adapter, "a multi-process history is meaningless")
    task = partial(workload_task, adapter, spec, new_run_id())
    return History.merge(*race_in_processes(workers, task, timeout_s=timeout_s))
