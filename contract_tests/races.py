"""The one race runner: N racers run ``task(index, sync)`` together, in threads, OS processes or Spark tasks.

A *task* is ``task(index, sync) -> result``: racer ``index`` of N calls ``sync()`` at the points where
all racers must meet (each racer the same number of times), so every contention phase is a synchronized
burst and a race window of milliseconds is hit by design, not by luck. The same task runs unchanged on
every executor:

* :func:`race_in_threads`: ``sync`` is a ``threading.Barrier``;
* :func:`race_in_processes`: spawned processes (never fork a process whose Tokio runtime runs), ``sync``
  a spawn-context barrier; the task must pickle (a top-level function or a ``functools.partial`` of one),
  and adapters in it are reopened from their configuration;
* ``contract_tests.spark_races.race_in_spark_tasks``: one Spark task per racer, ``sync`` a clock grid.

A racer that raises, hangs or dies makes the race incomplete: :class:`RaceError`, never a partial result
(a verdict on missing operations would be a guess); one still running at the deadline raises
:class:`RaceTimeout`. Hung processes are killed at once (the kernel then releases whatever they held, such
as file locks); hung threads cannot be stopped, so they are left running as daemons.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
Sync = Callable[[], object]
Task = Callable[[int, Sync], T]

SPAWN = multiprocessing.get_context("spawn")
# A racer that never reaches the next rendezvous releases the others after this long.
SYNC_TIMEOUT_S = 120.0
RACE_TIMEOUT_S = 300.0


class RaceError(RuntimeError):
    """A racer crashed, hung, died or was retried: the race's results are incomplete, so no verdict."""


class RaceTimeout(RaceError):
    """A racer was still running at the race's deadline: it hung (blocked forever, deadlocked)."""


def no_sync() -> None:
    """The ``sync`` of a racer that runs alone."""
    return None


def race_in_threads(racers: int, task: Task[T], timeout_s: float = RACE_TIMEOUT_S) -> list[T]:
    """Run ``task(i, sync)`` for i in 0..racers-1 in threads released together; results in racer order."""
    if racers < 1:
        raise ValueError(f"a race needs at least one racer, got {racers}")
    barrier = threading.Barrier(racers, timeout=SYNC_TIMEOUT_S)
    results: dict[int, T] = {}
    failures: list[str] = []

    def run(index: int) -> None:
        try:
            results[index] = task(index, barrier.wait)
        except BaseException:
            failures.append(traceback.format_exc())
            barrier.abort()  # release the others instead of letting them wait out the timeout

    threads = [threading.Thread(target=run, args=(i,), name=f"racer-{i}", daemon=True) for i in range(racers)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [thread.name for thread in threads if thread.is_alive()]
    if hung:
        raise RaceTimeout(f"thread racers {hung} did not finish within {timeout_s:g} s")
    if failures:
        raise RaceError(f"{len(failures)} of {racers} thread racers failed; first:\n{failures[0]}")
    return [results[i] for i in range(racers)]


def _process_main(task: Task[Any], index: int, barrier: Any, out: Any) -> None:
    try:
        out.put((index, task(index, barrier.wait), None))
    except BaseException:
        barrier.abort()
        out.put((index, None, traceback.format_exc()))
    # The report is in the pipe before the interpreter tears down (a native library's threads may make
    # that exit unclean): what the racer found is never lost to how it exits.
    out.close()
    out.join_thread()


def race_in_processes(racers: int, task: Task[T], timeout_s: float = RACE_TIMEOUT_S) -> list[T]:
    """Run ``task(i, sync)`` in ``racers`` spawned processes released together; results in racer order.

    Fails as soon as a process dies without reporting (a crashed racer must not cost the whole timeout);
    processes that have not reported by the deadline are killed.
    """
    if racers < 1:
        raise ValueError(f"a race needs at least one racer, got {racers}")
    barrier = SPAWN.Barrier(racers, timeout=SYNC_TIMEOUT_S)
    out = SPAWN.Queue()
    processes = [
        SPAWN.Process(target=_process_main, args=(task, i, barrier, out), name=f"racer-{i}")
        for i in range(racers)
    ]
    for process in processes:
        process.start()
    results: dict[int, T] = {}
    failures: list[str] = []
    reported: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        # Drain before joining: a child blocks on exit until what it queued is read.
        while len(reported) < racers:
            try:
                index, result, failure = out.get(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                # A racer that reported and then exited uncleanly did not lose its report.
                dead = [
                    p.name
                    for i, p in enumerate(processes)
                    if i not in reported and p.exitcode not in (None, 0)
                ]
                if dead:
                    raise RaceError(f"process racers {dead} died; the race is incomplete") from None
                if time.monotonic() > deadline:
                    hung = [p.name for i, p in enumerate(processes) if i not in reported]
                    raise RaceTimeout(
                        f"process racers {hung} did not report within {timeout_s:g} s (killed)"
                    ) from None
                continue
            reported.add(index)
            if failure is None:
                results[index] = result
            else:
                failures.append(failure)
    finally:
        for index, process in enumerate(processes):
            # A racer that reported exits on its own; one that did not is hung or dead: kill it now.
            process.join(timeout=30 if index in reported else 0)
            if process.is_alive():
                process.kill()
                process.join()
    if failures:
        raise RaceError(f"{len(failures)} of {racers} process racers failed; first:\n{failures[0]}")
    return [results[i] for i in range(racers)]
