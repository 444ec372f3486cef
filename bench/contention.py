"""Local CAS under contention: N spawned processes incrementing one counter for a fixed time.

``adapter`` workers do ``read_versioned`` + ``write_if_match`` and retry on conflict; ``floor`` workers run
the cheapest correct loop by hand: ``flock`` the directory, read the counter, write a temporary file,
``rename`` it over the counter, unlock. Both count successful increments; the floor never retries.
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
                os.rename(staged, counter)
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
        workers = [SPAWN.Process(target=_worker, args=(mode, root, duration_s, barrier, results))
                   for _ in range(processes)]  # fmt: skip
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
