"""Local CAS under contention: N spawned processes incrementing one counter for a fixed time.

``adapter`` workers do ``read_versioned`` + ``write_if_match`` and retry on conflict; ``floor`` workers run
the cheapest correct loop by hand: ``flock`` the directory, read the counter, write a temporary file and
``fsync`` it, ``rename`` it over the counter, ``fsync`` the directory, unlock. Both count successful
increments; the floor never retries. The floor is as durable as the adapter (an acknowledged local write
survives a power loss): without the two ``fsync`` it would measure a promise the adapter does not make.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

SPAWN = multiprocessing.get_context("spawn")  # never fork a process whose Tokio runtime is running
MODES = ("adapter", "floor")


@dataclass(frozen=True)
class ContentionResult:
    mode: str
    processes: int
    increments: int
    duration_s: float

    @property
    def ops_per_s(self) -> float:
        return self.increments / self.duration_s


def _adapter_loop(root: str, deadline: float) -> int:
    from storage_adapter import open_adapter

    adapter = open_adapter(f"file://{root}")
    done = 0
    while time.monotonic() < deadline:
        current = adapter.read_versioned("counter")
        if adapter.write_if_match("counter", str(int(current.data) + 1), current.token) is not None:
            done += 1
    return done


def _floor_loop(root: str, deadline: float) -> int:
    counter = os.path.join(root, "counter")
    dir_fd = os.open(root, os.O_RDONLY)
    done = 0
    try:
        while time.monotonic() < deadline:
            fcntl.flock(dir_fd, fcntl.LOCK_EX)
            try:
                with open(counter, "rb") as f:
                    value = int(f.read())
                fd, staged = tempfile.mkstemp(dir=root, prefix=".stage-")
                with os.fdopen(fd, "wb") as f:
                    f.write(str(value + 1).encode())
                    f.flush()
                    os.fsync(f.fileno())
                os.rename(staged, counter)
                os.fsync(dir_fd)
            finally:
                fcntl.flock(dir_fd, fcntl.LOCK_UN)
            done += 1
    finally:
        os.close(dir_fd)
    return done


def _worker(mode: str, root: str, duration_s: float, barrier: Any, results: Any) -> None:
    barrier.wait()
    deadline = time.monotonic() + duration_s
    results.put((_adapter_loop if mode == "adapter" else _floor_loop)(root, deadline))


def run_contention(mode: str, processes: int, duration_s: float) -> ContentionResult:
    """Increments per second of ``processes`` workers in ``mode`` on a fresh local directory."""
    with tempfile.TemporaryDirectory(prefix=f"bench-cas-{mode}-") as root:
        with open(os.path.join(root, "counter"), "w") as f:
            f.write("0")
        barrier, results = SPAWN.Barrier(processes), SPAWN.Queue()
        workers = [
            SPAWN.Process(target=_worker, args=(mode, root, duration_s, barrier, results))
            for _ in range(processes)
        ]
        for w in workers:
            w.start()
        counts = [results.get(timeout=duration_s + 120) for _ in workers]
        for w in workers:
            w.join(timeout=30)
        with open(os.path.join(root, "counter")) as f:
            final = int(f.read())
        if final != sum(counts):
            raise RuntimeError(
                f"{mode}: counter {final} != {sum(counts)} acknowledged increments: lost updates"
            )
        return ContentionResult(mode, processes, sum(counts), duration_s)


# -- engine commits under contention ---------------------------------------------------------------------
@dataclass(frozen=True)
class EngineContentionResult:
    """``writers`` appending one-row commits for ``duration_s`` to one table (``same_table``) or one table
    each. ``exhausted``: commits that raised CommitRetriesExhaustedError; ``per_writer``: commits landed by
    each writer (fairness); ``requests``: storage requests of all writers (CountingAdapter)."""

    backend: str
    writers: int
    same_table: bool
    commits: int
    exhausted: int
    per_writer: tuple[int, ...]
    requests: int
    duration_s: float

    @property
    def commits_per_s(self) -> float:
        return self.commits / self.duration_s

    @property
    def failure_rate(self) -> float:
        return self.exhausted / max(1, self.commits + self.exhausted)

    @property
    def requests_per_commit(self) -> float:
        return self.requests / max(1, self.commits + self.exhausted)


def _open_writer(adapter: Any, table: str) -> tuple[Any, Any]:
    """A writer's engine over a CountingAdapter of ``adapter``, warmed up by one commit to ``table``
    (imports, the open and the first Parquet write take seconds on a loaded machine: not timed)."""
    import pyarrow as pa

    from contract_tests.counting import CountingAdapter
    from storage_adapter.engine import Engine

    counting = CountingAdapter(adapter)
    engine = Engine.open(counting)
    engine.commit({table: pa.table({"n": [-1]})})
    counting.reset()
    return engine, counting


def _engine_loop(engine: Any, counting: Any, table: str, deadline: float) -> tuple[int, int, int]:
    """(commits landed, CommitRetriesExhaustedError count, storage requests) of one writer."""
    import pyarrow as pa

    from storage_adapter.engine import CommitRetriesExhaustedError

    done = exhausted = 0
    while time.monotonic() < deadline:
        try:
            engine.commit({table: pa.table({"n": [done]})})
            done += 1
        except CommitRetriesExhaustedError:
            exhausted += 1
    return done, exhausted, counting.total


def _engine_worker(adapter: Any, table: str, duration_s: float, barrier: Any, results: Any) -> None:
    engine, counting = _open_writer(adapter, table)
    barrier.wait()
    results.put(_engine_loop(engine, counting, table, time.monotonic() + duration_s))


def run_engine_contention(
    backend: str, writers: int, same_table: bool, duration_s: float
) -> EngineContentionResult:
    """:func:`engine_contention` on a fresh root of ``backend`` (``memory`` or ``local``)."""
    from storage_adapter import open_adapter

    with tempfile.TemporaryDirectory(prefix="bench-engine-") as root:
        url = (
            f"file://{root}"
            if backend == "local"
            else f"memory://bench-engine-{os.getpid()}-{time.time_ns()}"
        )
        return engine_contention(open_adapter(url), writers, same_table, duration_s)


def engine_contention(
    adapter: Any, writers: int, same_table: bool, duration_s: float
) -> EngineContentionResult:
    """Commits per second and retry exhaustions of ``writers`` engines appending on the empty root
    ``adapter``: threads of this process where its store is per process (memory), else spawned
    processes, each unpickling the adapter (its URL and options)."""
    import threading

    import pyarrow as pa

    from storage_adapter.engine import Engine

    tables = ["t0"] * writers if same_table else [f"t{i}" for i in range(writers)]
    setup = Engine.open(adapter)
    for name in sorted(set(tables)):
        setup.create_table(name, pa.schema([("n", pa.int64())]))
    if not adapter.capabilities.shared_across_processes:
        outcomes: list[tuple[int, int, int]] = []
        start = threading.Barrier(writers)

        def run(table: str) -> None:
            engine, counting = _open_writer(adapter, table)
            start.wait()
            outcomes.append(_engine_loop(engine, counting, table, time.monotonic() + duration_s))

        threads = [threading.Thread(target=run, args=(t,)) for t in tables]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        barrier, results = SPAWN.Barrier(writers), SPAWN.Queue()
        procs = [
            SPAWN.Process(target=_engine_worker, args=(adapter, t, duration_s, barrier, results))
            for t in tables
        ]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=duration_s + 300) for _ in procs]
        for p in procs:
            p.join(timeout=30)
    landed = sum(setup.read(t).num_rows for t in set(tables)) - writers  # less the warm-up commits
    commits = sum(o[0] for o in outcomes)
    if landed != commits:
        raise RuntimeError(
            f"engine {adapter.backend}: {landed} rows visible != {commits} acknowledged commits"
        )
    return EngineContentionResult(
        adapter.backend,
        writers,
        same_table,
        commits,
        sum(o[1] for o in outcomes),
        tuple(sorted(o[0] for o in outcomes)),
        sum(o[2] for o in outcomes),
        duration_s,
    )


def main() -> None:
    """``python -m bench.contention [--seconds S] [--backends memory,local] [--writers 1,2,4,8]``: the engine
    contention table (markdown)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--backends", default="memory,local")
    parser.add_argument("--writers", default="1,2,4,8")
    args = parser.parse_args()
    print("| backend | tables | writers | commits/s | exhausted | failure % | requests/commit | per writer |")
    print("|---|---|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        for same in (True, False):
            for n in (int(w) for w in args.writers.split(",")):
                r = run_engine_contention(backend, n, same, args.seconds)
                print(
                    f"| {backend} | {'one' if same else 'one each'} | {n} | {r.commits_per_s:.1f} | "
                    f"{r.exhausted} | {100 * r.failure_rate:.2f} | {r.requests_per_commit:.1f} | "
                    f"{','.join(map(str, r.per_writer))} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
