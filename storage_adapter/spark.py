"""PySpark at the edge: a SparkSession configured for this project's jobs, and Spark as a parallel driver.

Executors reopen adapters from their pickled config, so a job runs unchanged on ``local[N]`` and on any
cluster master. Worker processes must run this interpreter (``PYSPARK_PYTHON``) to see the package.

Drivers: :func:`run_workload_on_spark` (a recorded stress workload, for the linearizability checker),
:func:`race_write_if_absent` (N tasks racing creates: exactly one winner per key) and
:func:`race_cas_increments` (N tasks doing CAS increments: an exact total). Each runs one task per
partition, by default in a barrier stage (``rdd.barrier().mapPartitions``) so the tasks start their
races together; a barrier stage needs as many free slots as tasks, which is checked up front.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from storage_adapter.history import History
from storage_adapter.workloads import (
    WorkloadError,
    WorkloadSpec,
    new_run_id,
    no_sync,
    require_shared_store,
    run_worker,
)


def spark_session(master: str = "local[2]", app_name: str = "storage-adapter") -> Any:
    """Get or create a SparkSession: UI off, driver on loopback, quiet logs, small shuffles."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


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


def _run_tasks(
    spark: Any,
    tasks: int,
    barrier: bool,
    task: Callable[[int, Callable[[], None]], Any],
    slot_s: float = DEFAULT_SLOT_S,
) -> list[Any]:
    """Run ``task(index, sync)`` in ``tasks`` Spark tasks (one partition each); return their results in
    task order. In a barrier stage ``sync`` is a :class:`ClockGrid` agreed by all tasks (each call
    releases every task within milliseconds); otherwise it is a no-op.

    Raises WorkloadError when any task ran more than once (a retry: the first attempt's operations would
    be missing from what the driver receives).
    """
    if tasks < 1:
        raise ValueError(f"need at least one task, got {tasks}")
    if barrier:
        _check_barrier_slots(spark, tasks)

    def partition(_rows: Iterator[Any]) -> Iterator[tuple[int, int, Any]]:
        from pyspark import BarrierTaskContext, TaskContext

        if barrier:
            context = BarrierTaskContext.get()
            clocks = context.allGather(str(time.time_ns()))
            sync: Callable[[], None] = ClockGrid(
                max(map(int, clocks)) + int(RENDEZVOUS_MARGIN_S * 1e9), slot_s
            )
        else:
            context = TaskContext.get()
            sync = no_sync
        index = context.partitionId()  # type: ignore[union-attr]
        yield (index, context.attemptNumber(), task(index, sync))  # type: ignore[union-attr]

    rdd = spark.sparkContext.parallelize(range(tasks), tasks)
    stage = rdd.barrier().mapPartitions(partition) if barrier else rdd.mapPartitions(partition)
    rows = sorted(stage.collect(), key=lambda row: row[0])
    retried = [index for index, attempt, _ in rows if attempt > 0]
    if retried or len(rows) != tasks:
        raise WorkloadError(
            f"Spark tasks {retried} were retried (or results are missing: {len(rows)} of {tasks}); "
            "operations of failed attempts are not in the history"
        )
    return [result for _, _, result in rows]


def run_workload_on_spark(
    spark: Any,
    adapter: Any,
    spec: WorkloadSpec,
    tasks: int | None = None,
    barrier: bool = True,
    slot_s: float = DEFAULT_SLOT_S,
) -> History:
    """Run the stress workload (:mod:`storage_adapter.workloads`) as one Spark job of ``tasks`` tasks
    (default: ``defaultParallelism``), each reopening ``adapter`` from its pickle and recording its own
    history; the driver merges them. With ``barrier`` the tasks run in a barrier stage and every
    contention phase starts as a synchronized burst on a :class:`ClockGrid` of ``slot_s`` slots (a slot
    should exceed one phase's duration; an overrun only loosens the synchronization, never the check).

    Raises ValueError for a per-process (memory) store or a barrier stage wider than the free slots, and
    WorkloadError when a task was retried.
    """
    require_shared_store(adapter, "Spark tasks would each see their own")
    tasks = tasks or spark.sparkContext.defaultParallelism
    run_id = new_run_id()
    event_lists = _run_tasks(
        spark, tasks, barrier, lambda i, sync: run_worker(adapter, spec, i, run_id, sync), slot_s
    )
    return History.merge(*event_lists)


@dataclass(frozen=True)
class CreateRace:
    """Outcome of :func:`race_write_if_absent`: for each key, the tasks whose ``write_if_absent``
    returned True, which task's body is stored, and the stored body."""

    winners: dict[str, tuple[int, ...]]
    stored: dict[str, bytes | None]

    @property
    def exactly_one_winner_per_key(self) -> bool:
        """Each key has one winner and holds exactly that winner's body."""
        return all(
            len(won) == 1 and self.stored[key] == _race_body(key, won[0]) for key, won in self.winners.items()
        )


def _race_body(key: str, task: int) -> bytes:
    return f"{key} created by task {task}".encode()


def race_write_if_absent(
    spark: Any, adapter: Any, keys: Sequence[str], tasks: int | None = None, barrier: bool = True
) -> CreateRace:
    """``tasks`` Spark tasks each call ``write_if_absent`` on every key of ``keys`` (absent beforehand),
    after a common barrier when ``barrier``. The contract: exactly one winner per key."""
    tasks = tasks or spark.sparkContext.defaultParallelism
    keys = list(keys)

    def task(index: int, sync: Callable[[], None]) -> list[str]:
        sync()
        return [key for key in keys if adapter.write_if_absent(key, _race_body(key, index))]

    won_by_task = _run_tasks(spark, tasks, barrier, task)
    winners = {key: tuple(i for i, won in enumerate(won_by_task) if key in won) for key in keys}
    return CreateRace(winners, {key: adapter.read_if_exists(key) for key in keys})


@dataclass(frozen=True)
class CasIncrements:
    """Outcome of :func:`race_cas_increments`: the counter's final value, the value it must have
    (``tasks * increments``), and how many CAS attempts lost a race and were retried."""

    final: int
    expected: int
    conflicts: int

    @property
    def exact(self) -> bool:
        return self.final == self.expected


def race_cas_increments(
    spark: Any, adapter: Any, key: str, increments: int, tasks: int | None = None, barrier: bool = True
) -> CasIncrements:
    """``tasks`` Spark tasks each add 1 to the counter at ``key`` ``increments`` times, by
    read_versioned + write_if_match retried until it succeeds. The counter is (re)set to 0 first. The
    contract: the final value is exactly ``tasks * increments``. Counter bodies strictly increase, so no
    two versions share bytes (no ABA, even with content-hash tokens)."""
    tasks = tasks or spark.sparkContext.defaultParallelism
    adapter.write(key, b"0")

    def task(index: int, sync: Callable[[], None]) -> int:
        sync()
        conflicts = 0
        for _ in range(increments):
            while True:
                current = adapter.read_versioned(key)
                value = int(current.data.split(b" ")[0]) + 1
                if (
                    adapter.write_if_match(key, f"{value} by task {index}".encode(), current.token)
                    is not None
                ):
                    break
                conflicts += 1
        return conflicts

    conflicts = sum(_run_tasks(spark, tasks, barrier, task))
    final = int(adapter.read_bytes(key).split(b" ")[0])
    return CasIncrements(final=final, expected=tasks * increments, conflicts=conflicts)
