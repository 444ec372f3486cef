"""Spark as a parallel driver of races: recorded workloads and contention races run as Spark tasks.

Executors reopen adapters from their pickled config, so a job runs unchanged on ``local[N]`` and on any
cluster master. Worker processes must run this interpreter (``PYSPARK_PYTHON``) to see the package.

Drivers: :func:`run_workload_on_spark` (a recorded stress workload, for the linearizability checker),
:func:`race_write_if_absent` (N tasks racing creates: exactly one winner per key) and
:func:`race_cas_increments` (N tasks doing CAS increments: an exact total). Each runs one task per
partition, by default in a barrier stage (``rdd.barrier().mapPartitions``) so the tasks start their
races together; a barrier stage needs as many free slots as tasks, which is checked up front.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from contract_tests import race_tasks
from contract_tests.history import History
from contract_tests.races import RaceError, Sync, no_sync
from contract_tests.workloads import WorkloadSpec, new_run_id, require_shared_store, workload_task
from storage_adapter.protocol import StorageAdapter

# -- parallel I/O drivers ------------------------------------------------------------------------------
# Every task below reopens the adapter by unpickling it (the closure carries the pickled adapter), so the
# jobs run unchanged on local[N] and on a cluster whose executors reach the same store.


def _check_barrier_slots(spark: Any, tasks: int) -> None:
    """A barrier stage with more tasks than free slots waits on Spark's slot check for minutes instead of
    failing; refuse it up front."""
    slots = spark.sparkContext.defaultParallelism
    if tasks > slots:
        raise ValueError(
            f"a barrier stage of {tasks} tasks needs {tasks} free task slots; this Spark context has "
            f"{slots} (defaultParallelism). Use at most {slots} tasks or barrier=False."
        )


# Spark's barrier() and allGather() wait by polling once a second (BarrierTaskContext sleeps 1000 ms
# between checks), so the tasks they release are spread over up to a second: useless for a burst that
# must land inside a race window of milliseconds. One allGather agrees on a start instant instead, and the
# tasks then meet on a shared wall-clock grid: the k-th sync of every task returns at origin + k * slot.
RENDEZVOUS_MARGIN_S = 2.0
DEFAULT_SLOT_S = 0.25


class ClockGrid:
    """``sync()`` for the tasks of one barrier stage: the k-th call sleeps until ``origin_ns + k * slot``
    (wall clock, so it also works across the hosts of a cluster, within their clock skew). A task that
    overran a slot returns at once and rejoins the grid at its next sync."""

    def __init__(self, origin_ns: int, slot_s: float) -> None:
        self.next_ns = origin_ns
        self.slot_ns = int(slot_s * 1e9)

    def __call__(self) -> None:
        delay_ns = self.next_ns - time.time_ns()
        if delay_ns > 0:
            time.sleep(delay_ns / 1e9)
        self.next_ns += self.slot_ns


def race_in_spark_tasks(
    spark: Any,
    tasks: int,
    barrier: bool,
    task: Callable[[int, Callable[[], None]], Any],
    slot_s: float = DEFAULT_SLOT_S,
) -> list[Any]:
    """Run ``task(index, sync)`` in ``tasks`` Spark tasks (one partition each); return their results in
    task order. In a barrier stage ``sync`` is a :class:`ClockGrid` agreed by all tasks (each call
    releases every task within milliseconds); otherwise it is a no-op.

    Raises RaceError when any task ran more than once (a retry: the first attempt's operations would
    be missing from what the driver receives).
    """
    if tasks < 1:
        raise ValueError(f"need at least one task, got {tasks}")
    if barrier:
        _check_barrier_slots(spark, tasks)

    def partition(_rows: Iterator[Any]) -> Iterator[tuple[int, int, Any]]:
        from pyspark import BarrierTaskContext, TaskContext

        sync: Sync
        if barrier:
            stage = BarrierTaskContext.get()
            clocks = stage.allGather(str(time.time_ns()))
            sync = ClockGrid(max(map(int, clocks)) + int(RENDEZVOUS_MARGIN_S * 1e9), slot_s)
            context: TaskContext | None = stage
        else:
            context = TaskContext.get()
            sync = no_sync
        if context is None:
            raise RaceError("a Spark race task ran outside a task context")
        index = context.partitionId()
        yield (index, context.attemptNumber(), task(index, sync))

    rdd = spark.sparkContext.parallelize(range(tasks), tasks)
    stage = rdd.barrier().mapPartitions(partition) if barrier else rdd.mapPartitions(partition)
    rows = sorted(stage.collect(), key=lambda row: row[0])
    retried = [index for index, attempt, _ in rows if attempt > 0]
    if retried or len(rows) != tasks:
        raise RaceError(
            f"Spark tasks {retried} were retried (or results are missing: {len(rows)} of {tasks}); "
            "operations of failed attempts are not in the history"
        )
    return [result for _, _, result in rows]


def run_workload_on_spark(
    spark: Any,
    adapter: StorageAdapter,
    spec: WorkloadSpec,
    tasks: int | None = None,
    barrier: bool = True,
    slot_s: float = DEFAULT_SLOT_S,
) -> History:
    """Run the stress workload (:mod:`contract_tests.workloads`) as one Spark job of ``tasks`` tasks
    (default: ``defaultParallelism``), each reopening ``adapter`` from its pickle and recording its own
    history; the driver merges them. With ``barrier`` the tasks run in a barrier stage and every
    contention phase starts as a synchronized burst on a :class:`ClockGrid` of ``slot_s`` slots (a slot
    should exceed one phase's duration; an overrun only loosens the synchronization, never the check).

    Raises ValueError for a per-process (memory) store or a barrier stage wider than the free slots, and
    RaceError when a task was retried.
    """
    require_shared_store(adapter, "Spark tasks would each see their own")
    tasks = tasks or spark.sparkContext.defaultParallelism
    run_id = new_run_id()
    event_lists = race_in_spark_tasks(
        spark, tasks, barrier, partial(workload_task, adapter, spec, run_id), slot_s
    )
    return History.merge(*event_lists)


@dataclass(frozen=True)
class CreateRace:
    """Outcome of :func:`race_write_if_absent`: for each key, the tasks whose ``write_if_absent``
    won (returned a token), and the stored body."""

    winners: dict[str, tuple[int, ...]]
    stored: dict[str, bytes | None]

    @property
    def exactly_one_winner_per_key(self) -> bool:
        """Each key has one winner and holds exactly that winner's body."""
        return all(
            len(won) == 1 and self.stored[key] == race_tasks.create_body(key, won[0])
            for key, won in self.winners.items()
        )


def race_write_if_absent(
    spark: Any, adapter: StorageAdapter, keys: Sequence[str], tasks: int | None = None, barrier: bool = True
) -> CreateRace:
    """``tasks`` Spark tasks each call ``write_if_absent`` on every key of ``keys`` (absent beforehand),
    meeting before each key when ``barrier``. The contract: exactly one winner per key."""
    tasks = tasks or spark.sparkContext.defaultParallelism
    keys = list(keys)
    attempts = race_in_spark_tasks(spark, tasks, barrier, partial(race_tasks.create_race, adapter, keys))
    winners = {
        key: tuple(i for i, mine in enumerate(attempts) for a in mine if a.key == key and a.won)
        for key in keys
    }
    return CreateRace(winners, {key: adapter.read_if_exists(key) for key in keys})


@dataclass(frozen=True)
class CasIncrements:
    """Outcome of :func:`race_cas_increments`: the counter's final value, the value it must have
    (``tasks * increments``), how many CAS attempts lost a race and were retried, and whether a task
    stopped at its attempt budget or deadline (then a short count is no evidence of a lost update)."""

    final: int
    expected: int
    conflicts: int
    cut_off: bool

    @property
    def exact(self) -> bool:
        return self.final == self.expected


def race_cas_increments(
    spark: Any,
    adapter: StorageAdapter,
    key: str,
    increments: int,
    tasks: int | None = None,
    barrier: bool = True,
) -> CasIncrements:
    """``tasks`` Spark tasks each add 1 to the JSON counter at ``key`` ``increments`` times, by
    read_versioned + write_if_match retried with backoff, within the bounds of
    :func:`contract_tests.race_tasks.cas_increments`.
    The counter is (re)set to 0 first. The contract: the final value is exactly ``tasks * increments``."""
    tasks = tasks or spark.sparkContext.defaultParallelism
    adapter.write(key, json.dumps({"n": 0}))
    task = partial(race_tasks.cas_increments, adapter, key, increments)
    tallies = race_in_spark_tasks(spark, tasks, barrier, task)
    final = race_tasks.counter_value(adapter, key)
    return CasIncrements(
        final=final,
        expected=tasks * increments,
        conflicts=sum(t.conflicts for t in tallies),
        cut_off=any(t.cut_off for t in tallies),
    )
