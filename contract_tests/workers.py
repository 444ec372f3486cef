"""Worker functions for the contract's process races. Top-level so a spawned process can import them.

Each takes a pickled adapter (reopened from its config in the child) and reports through a queue.
"""

from __future__ import annotations

import json
from typing import Any

from contract_tests.bodies import body_is_whole, make_body


def race_create(adapter: Any, keys: list[str], worker: str, barrier: Any, results: Any) -> None:
    """For each key: wait for every worker, then try write_if_absent. Report (key, won, readback_ok)."""
    outcome = []
    for key in keys:
        body = make_body(f"{worker}-{key}", 512)
        barrier.wait()
        won = adapter.write_if_absent(key, body)
        readback_ok = adapter.read_bytes(key) == body if won else True
        outcome.append((key, won, readback_ok, body))
    results.put((worker, outcome))


def cas_increment(adapter: Any, key: str, worker: str, increments: int, barrier: Any, results: Any) -> None:
    """Add ``increments`` to the JSON counter at ``key`` by CAS, retrying on conflict.

    Reports the counter values this worker replaced: across all workers they must be exactly
    0..N*M-1, each once (a duplicate is a lost update).
    """
    barrier.wait()
    replaced = []
    attempt = 0
    while len(replaced) < increments:
        attempt += 1
        current = adapter.read_versioned(key)
        value = json.loads(current.data)["n"]
        body = json.dumps({"n": value + 1, "by": worker, "attempt": attempt}).encode()
        if adapter.write_if_match(key, body, current.token) is not None:
            replaced.append(value)
    results.put((worker, replaced))


def read_until_stopped(adapter: Any, key: str, stop: Any, results: Any) -> None:
    """Read ``key`` until ``stop`` is set; report (reads, torn reads, first torn sample)."""
    reads = torn = 0
    sample = b""
    while not stop.is_set():
        data = adapter.read_bytes(key)
        reads += 1
        if not body_is_whole(data):
            torn += 1
            sample = sample or data[:80]
    results.put((reads, torn, sample))
