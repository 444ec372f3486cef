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
(a verdict on missing operations would be a guess).
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
    if any(thread.is_alive() for thread in threads):
        raise RaceError(f"thread racers did not finish within {timeout_s:.0f} s")
    if failures:
        raise RaceError(f"{len(failures)} of {racers} thread racers failed; first:\n{failures[0]}")
    return [results[i] for i in range(racers)]


def _process_main(task: Task[Any], index: int, barrier: Any, out: Any) -> None:
    try:
        out.put((index, task(index, barrier.wait), None))
    except BaseException:
        barrier.abort()
        out.put((index, None, traceback.format_exc()))


def race_in_processes(racers: int, task: Task[T], timeout_s: float = RACE_TIMEOUT_S) -> list[T]:
    """Run ``task(i, sync)`` in ``racers`` spawned processes released together; results in racer order.

    Fails as soon as a process dies without reporting (a crashed racer must not cost the whole timeout).
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
    deadline = time.monotonic() + timeout_s
    try:
        # Drain before joining: a child blocks on exit until what it queued is read.
        while len(results) + len(failures) < racers:
            try:
                index, result, failure = out.get(timeout=0.5)
            except queue.Empty:
                dead = [p.name for p in processes if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    what = (
                        f"racers {dead} died" if dead else f"racers did not report within {timeout_s:.0f} s"
                    )
                    raise RaceError(f"process {what}; the race is incomplete") from None
                continue
            if failure is None:
                results[index] = result
            else:
                failures.append(failure)
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
    if failures:
        raise RaceError(f"{len(failures)} of {racers} process racers failed; first:\n{failures[0]}")
    return [results[i] for i in range(racers)]
