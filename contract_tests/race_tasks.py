"""The contention races of the contract, as tasks for :mod:`contract_tests.races` (threads, processes or
Spark tasks run the very same code). Top-level functions, so a spawned process can import them; bind the
leading arguments with ``functools.partial`` and the runner supplies ``(index, sync)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from contract_tests.bodies import body_is_whole, make_body
from contract_tests.races import Sync
from storage_adapter.protocol import StorageAdapter


def create_body(key: str, racer: int) -> bytes:
    """The unique body racer ``racer`` tries to create at ``key``."""
    return make_body(f"r{racer}-{key}", 512)


@dataclass(frozen=True)
class CreateAttempt:
    """One racer's ``write_if_absent`` on one key: whether it won, and (if so) whether it could read its
    own bytes right after."""

    key: str
    won: bool
    readback_ok: bool


def create_race(adapter: StorageAdapter, keys: list[str], index: int, sync: Sync) -> list[CreateAttempt]:
    """For each key: meet the other racers, then try ``write_if_absent`` with this racer's body."""
    attempts = []
    for key in keys:
        body = create_body(key, index)
        sync()
        won = adapter.write_if_absent(key, body)
        attempts.append(CreateAttempt(key, won, adapter.read_bytes(key) == body if won else True))
    return attempts


@dataclass(frozen=True)
class CasTally:
    """One racer's CAS increments: the counter values it replaced (across all racers they must be exactly
    0..N*M-1, each once: a duplicate is a lost update) and how many attempts lost a race."""

    replaced: tuple[int, ...]
    conflicts: int


def counter_value(adapter: StorageAdapter, key: str) -> int:
    """The value of the JSON counter at ``key``."""
    return int(json.loads(adapter.read_bytes(key))["n"])


def cas_increments(adapter: StorageAdapter, key: str, increments: int, index: int, sync: Sync) -> CasTally:
    """Add ``increments`` to the JSON counter at ``key`` by read_versioned + write_if_match, retrying on
    conflict. Bodies name the racer and attempt, so no two versions share bytes (no ABA, even where tokens
    are content hashes)."""
    sync()
    replaced: list[int] = []
    attempt = conflicts = 0
    while len(replaced) < increments:
        attempt += 1
        current = adapter.read_versioned(key)
        value = int(json.loads(current.data)["n"])
        body = json.dumps({"n": value + 1, "by": index, "attempt": attempt})
        if adapter.write_if_match(key, body, current.token) is not None:
            replaced.append(value)
        else:
            conflicts += 1
    return CasTally(tuple(replaced), conflicts)


@dataclass(frozen=True)
class ReadTally:
    """A reader's view of a key being replaced: reads made, torn reads seen, the first torn sample."""

    reads: int
    torn: int
    sample: bytes


REPLACE_BODY_SIZE = 256 * 1024


def replace_while_reading(
    adapter: StorageAdapter, key: str, writes: int, index: int, sync: Sync
) -> ReadTally:
    """Racer 0 replaces ``key`` ``writes`` times with bodies of varying size, then writes ``key.done``; the
    other racers read ``key`` until they see ``key.done``, checking every body is whole."""
    sync()
    if index == 0:
        for i in range(writes):
            adapter.write(key, make_body(f"v{i}", REPLACE_BODY_SIZE + (i % 3) * 1000))
        adapter.write(f"{key}.done", b"")
        return ReadTally(0, 0, b"")
    reads = torn = 0
    sample = b""
    while True:
        data = adapter.read_bytes(key)
        reads += 1
        if not body_is_whole(data):
            torn += 1
            sample = sample or data[:80]
        if reads % 8 == 0 and adapter.exists(f"{key}.done"):
            return ReadTally(reads, torn, sample)
