"""The contention races of the contract, as tasks for :mod:`contract_tests.races` (threads, processes or
Spark tasks run the very same code). Top-level functions, so a spawned process can import them; bind the
leading arguments with ``functools.partial`` and the runner supplies ``(index, sync)``.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from contract_tests.bodies import body_is_whole, describe, make_body
from contract_tests.history import Outcome, classify_error
from contract_tests.races import Sync
from storage_adapter.errors import NotFoundError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import Versioned


def create_body(key: str, racer: int) -> bytes:
    """The unique body racer ``racer`` tries to create at ``key``."""
    return make_body(f"r{racer}-{key}", 512)


@dataclass(frozen=True)
class CreateAttempt:
    """One racer's ``write_if_absent`` on one key: whether it won, and (if so) whether it could read its
    own bytes, under the token it was given, right after (losers never write, so nothing came between)."""

    key: str
    won: bool
    readback_ok: bool


def create_race(adapter: StorageAdapter, keys: list[str], index: int, sync: Sync) -> list[CreateAttempt]:
    """For each key: meet the other racers, then try ``write_if_absent`` with this racer's body."""
    attempts = []
    for key in keys:
        body = create_body(key, index)
        sync()
        token = adapter.write_if_absent(key, body)
        readback_ok = token is None or adapter.read_versioned(key) == Versioned(body, token)
        attempts.append(CreateAttempt(key, token is not None, readback_ok))
    return attempts


# Retries after a lost CAS back off exponentially with full jitter (a random sleep up to the cap), so
# racers that keep colliding spread out instead of retrying in lockstep.
CAS_BACKOFF_BASE_S = 0.001
CAS_BACKOFF_CAP_S = 0.05
# Uncontended CAS attempts with the current token before the primitive is judged broken.
CAS_PROBE_ATTEMPTS = 40
# A racer's bounds: attempts per increment it must make, and seconds. A correct CAS under N racers needs
# about N attempts per increment at worst; a racer reaching either bound stops and says so (cut off).
CAS_ATTEMPTS_PER_INCREMENT = 64
CAS_RACE_DEADLINE_S = 90.0


def backoff_s(consecutive_failures: int, rng: random.Random) -> float:
    """The sleep before the next retry: uniform in [0, min(cap, base * 2**failures)] (full jitter)."""
    return rng.uniform(0.0, min(CAS_BACKOFF_CAP_S, CAS_BACKOFF_BASE_S * 2 ** min(consecutive_failures, 16)))


@dataclass(frozen=True)
class CasProbe:
    """Uncontended CAS attempts with the token just read: how many were made and how many succeeded, and
    what the last rejected one sent."""

    attempts: int
    successes: int
    last_rejected_token: str | None

    def evidence(self) -> str:
        return (
            f"{self.successes} of {self.attempts} uncontended CAS attempts succeeded; each sent the token "
            f"read_versioned had just returned ({self.last_rejected_token!r} on the last), and "
            "write_if_match answered None (the server rejected If-Match with the current token)"
        )


def probe_cas(adapter: StorageAdapter, key: str, attempts: int = CAS_PROBE_ATTEMPTS) -> CasProbe:
    """Try CAS on ``key`` (a JSON counter) alone, with the current token, until one succeeds or
    ``attempts`` are made. A correct CAS succeeds on the first attempt; one that never does cannot make a
    contended race progress, so the race is not worth running."""
    last = None
    for made in range(1, attempts + 1):
        current = adapter.read_versioned(key)
        body = json.dumps({"n": int(json.loads(current.data)["n"]), "probe": made})
        if adapter.write_if_match(key, body, current.token) is not None:
            return CasProbe(made, 1, last)
        last = current.token
    return CasProbe(attempts, 0, last)


@dataclass(frozen=True)
class CasTally:
    """One racer's CAS increments: the counter values it replaced (across all racers they must be exactly
    0..N*M-1, each once: a duplicate is a lost update), its attempts, how many lost a race, and whether it
    stopped at its attempt budget or deadline before making all its increments."""

    replaced: tuple[int, ...]
    attempts: int
    conflicts: int
    cut_off: bool

    def line(self, index: int) -> str:
        cut = " (cut off by its budget)" if self.cut_off else ""
        return f"racer {index}: {len(self.replaced)} increments in {self.attempts} attempts{cut}"


def counter_value(adapter: StorageAdapter, key: str) -> int:
    """The value of the JSON counter at ``key``."""
    return int(json.loads(adapter.read_bytes(key))["n"])


def cas_increments(
    adapter: StorageAdapter,
    key: str,
    increments: int,
    index: int,
    sync: Sync,
    *,
    max_attempts: int | None = None,
    deadline_s: float = CAS_RACE_DEADLINE_S,
) -> CasTally:
    """Add ``increments`` to the JSON counter at ``key`` by read_versioned + write_if_match, retrying on
    conflict with jittered exponential backoff, for at most ``max_attempts`` attempts (default
    ``CAS_ATTEMPTS_PER_INCREMENT * increments``) and ``deadline_s`` seconds after the start. Bodies name the racer and attempt, so no two versions share bytes (no ABA,
    even where tokens are content hashes)."""
    sync()
    max_attempts = CAS_ATTEMPTS_PER_INCREMENT * increments if max_attempts is None else max_attempts
    rng = random.Random(index)
    deadline = time.monotonic() + deadline_s
    replaced: list[int] = []
    attempt = conflicts = streak = 0
    while len(replaced) < increments and attempt < max_attempts and time.monotonic() < deadline:
        attempt += 1
        current = adapter.read_versioned(key)
        value = int(json.loads(current.data)["n"])
        body = json.dumps({"n": value + 1, "by": index, "attempt": attempt})
        if adapter.write_if_match(key, body, current.token) is not None:
            replaced.append(value)
            streak = 0
        else:
            conflicts += 1
            streak += 1
            time.sleep(backoff_s(streak, rng))
    return CasTally(tuple(replaced), attempt, conflicts, cut_off=len(replaced) < increments)


@dataclass(frozen=True)
class ReadTally:
    """A reader's view of a key being replaced: reads made, torn reads seen, and the first torn read as
    :func:`~contract_tests.bodies.describe` shows it (its size and head: the body itself is 256 KiB)."""

    reads: int
    torn: int
    sample: str


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
        return ReadTally(0, 0, "")
    reads = torn = 0
    sample = ""
    while True:
        data = adapter.read_bytes(key)
        reads += 1
        if not body_is_whole(data):
            torn += 1
            sample = sample or describe(data)
        if reads % 8 == 0 and adapter.exists(f"{key}.done"):
            return ReadTally(reads, torn, sample)


# -- planned races: each racer's calls, round by round, on keys of its own choosing ----------------------
@dataclass(frozen=True)
class Move:
    """One racer's part in one round of a planned race (:func:`planned_race`).

    ``setup``, if set, is written at ``key`` before the racers meet (a ``write_if_match`` then sends the
    token that write returned). After the meeting, and ``delay_s`` later, the racer makes its call:
    ``write`` (``body`` at ``key``), ``delete``, ``write_if_match`` (``body`` at ``key``) or ``rename``
    (``key`` to ``target``). Delays stagger calls so that a fast call also lands inside a slower one.
    """

    op: str
    key: str
    body: bytes = b""
    target: str = ""
    setup: bytes | None = None
    delay_s: float = 0.0


@dataclass(frozen=True)
class Call:
    """What one call of a planned race answered: ``result`` (``"ok"`` for write and delete, ``"won"`` or
    ``"lost"`` for write_if_match, ``"moved"`` or ``"absent"`` (NotFoundError) for rename; the token for a
    setup write), or the error it raised, as ``error`` (``"Type: message"``) and its ``outcome`` by the
    rule of :func:`contract_tests.history.classify_error`."""

    racer: int
    round: int
    move: Move
    setup: bool = False
    result: str | None = None
    error: str | None = None
    outcome: Outcome = Outcome.OK

    def describe(self) -> str:
        move = self.move
        if self.setup:
            what = f"setup write({move.key!r})"
        elif move.op == "rename":
            what = f"rename({move.key!r}, {move.target!r})"
        else:
            what = f"{move.op}({move.key!r})"
        answer = self.result if self.error is None else f"raised {self.error}"
        return f"round {self.round} racer {self.racer}: {what} -> {answer}"


def _answer(adapter: StorageAdapter, move: Move, token: str | None) -> str:
    if move.op == "write":
        adapter.write(move.key, move.body)
        return "ok"
    if move.op == "delete":
        adapter.delete(move.key)
        return "ok"
    if move.op == "write_if_match":
        if token is None:
            raise ValueError(f"write_if_match on {move.key!r} needs a setup write for its token")
        return "lost" if adapter.write_if_match(move.key, move.body, token) is None else "won"
    if move.op == "rename":
        try:
            adapter.rename(move.key, move.target)
        except NotFoundError:
            return "absent"
        return "moved"
    raise ValueError(f"unknown planned call {move.op!r}")


def planned_race(
    adapter: StorageAdapter, plan: tuple[tuple[Move | None, ...], ...], index: int, sync: Sync
) -> list[Call]:
    """Racer ``index`` plays its column of ``plan`` (one row per round: a Move per racer, or None to sit
    the round out): setup write, meet the others, call. Every error is recorded in its Call, never raised,
    so the clause sees every answer and decides which are outcomes; a racer whose setup failed skips that
    round's call (but still meets the others)."""
    calls = []
    for round_, moves in enumerate(plan):
        move = moves[index]
        token = None
        if move is not None and move.setup is not None:
            call = _attempt(index, round_, move, True, partial(adapter.write, move.key, move.setup))
            calls.append(call)
            token = call.result
            if call.error is not None:
                move = None
        sync()
        if move is not None:
            if move.delay_s:
                time.sleep(move.delay_s)
            calls.append(_attempt(index, round_, move, False, partial(_answer, adapter, move, token)))
    return calls


def _attempt(racer: int, round_: int, move: Move, setup: bool, call: Callable[[], str]) -> Call:
    try:
        return Call(racer, round_, move, setup, result=call())
    except Exception as exc:  # recorded, not raised: whether it is an outcome is the clause's verdict
        error = f"{type(exc).__name__}: {exc}"
        return Call(racer, round_, move, setup, error=error, outcome=classify_error(exc))


def rename_burst(adapter: StorageAdapter, renames: int, index: int, sync: Sync) -> int:
    """Racer ``index`` moves its own object back and forth between two directories ``renames`` times, in
    the opposite direction to the racers of the other parity: every rename wants the same two directory
    locks, in crossing orders, many times over (a burst, not one rename per barrier, so the moments when
    one racer holds a lock another waits on keep recurring). Returns the renames made."""
    here, there = ("burst/d0", "burst/d1") if index % 2 == 0 else ("burst/d1", "burst/d0")
    key = f"racer-{index}"
    adapter.write(f"{here}/{key}", make_body(key, 64))
    adapter.write(f"{here}/keep-{index}", b"")  # both directories live on: no pruning between renames
    sync()
    for step in range(renames):
        src, dst = (here, there) if step % 2 == 0 else (there, here)
        adapter.rename(f"{src}/{key}", f"{dst}/{key}")
    return renames


# -- readers and listings racing renames -----------------------------------------------------------------------
# Keys an object is renamed along in one round (each in a directory of its own), its size, and how long a
# watcher waits for the last rename of a round before it gives up on the round.
RENAME_CHAIN = 5
CHAIN_BODY_SIZE = 4096
CHAIN_WATCH_S = 30.0


def chain_keys(round_: int) -> list[str]:
    """The keys round ``round_``'s object is renamed along, first to last."""
    return [f"chain/r{round_}/d{i}/obj" for i in range(RENAME_CHAIN)]


def chain_body(round_: int) -> bytes:
    return make_body(f"chain-{round_}", CHAIN_BODY_SIZE)


@dataclass(frozen=True)
class ChainWatch:
    """What one watcher saw of the rename chains: how many sweeps it made, and each sweep that found the
    object under two keys going down the chain (``doubles``), under no key going up it (``misses``), or
    bytes (a size, for a listing) that are not the object's (``torn``); and whether a round ended at
    its deadline instead of at its last rename (``cut_off``)."""

    sweeps: int
    doubles: tuple[str, ...]
    misses: tuple[str, ...]
    torn: tuple[str, ...]
    cut_off: bool


def _sweep(
    adapter: StorageAdapter, round_: int, floor: int, down: bool, listed: bool
) -> tuple[list[int], list[int]]:
    """One look at each key of round ``round_``'s chain from position ``floor`` on, last key first
    (``down``) or ``floor`` first: by ``read_if_exists``, or by a listing of the key's directory
    (``listed``). Returns the positions where the object was, and those where something else was."""
    keys, body = chain_keys(round_), chain_body(round_)
    present: list[int] = []
    wrong: list[int] = []
    for position in reversed(range(floor, len(keys))) if down else range(floor, len(keys)):
        key = keys[position]
        if listed:
            infos = adapter.list(key.rsplit("/", 1)[0])
            seen = [i.key == key and i.size == len(body) for i in infos]
        else:
            data = adapter.read_if_exists(key)
            seen = [] if data is None else [data == body]
        if seen:
            (present if all(seen) and len(seen) == 1 else wrong).append(position)
    return present, wrong


def renames_watched(adapter: StorageAdapter, rounds: int, index: int, sync: Sync) -> ChainWatch:
    """Racer 0 writes each round's object at the first key of its chain, then (the racers released
    together) renames it along the chain, one key at a time. The other racers watch it meanwhile:
    sweeps down the chain and up it, alternately, each by reads or by listings (alternating every two
    sweeps), from the furthest key they have seen it at, until a sweep finds it at the last key, where
    it stays.

    Renames only move it forward, so a sweep *down* that finds it under two keys saw one rename make it
    visible at its target while its source still held it, which an atomic rename never shows; and a
    sweep *up* from a key it has reached that finds it under no key saw it vanish from a key before it
    appeared at the next, which no rename may show (a copy then a delete shows both for a moment, never
    neither)."""
    sweeps = 0
    doubles: list[str] = []
    misses: list[str] = []
    torn: list[str] = []
    cut_off = False
    for round_ in range(rounds):
        keys = chain_keys(round_)
        if index == 0:
            adapter.write(keys[0], chain_body(round_))
        sync()
        if index == 0:
            for src, dst in itertools.pairwise(keys):
                adapter.rename(src, dst)
            continue
        deadline = time.monotonic() + CHAIN_WATCH_S
        floor = 0  # it has been seen there: it is there or further on
        while True:
            down, listed = sweeps % 2 == 0, sweeps % 4 >= 2
            present, wrong = _sweep(adapter, round_, floor, down, listed)
            floor = max([floor, *present])
            sweeps += 1
            seen = (
                f"round {round_}, a sweep {'down' if down else 'up'} the chain by "
                f"{'listings' if listed else 'reads'}: the object at {present}, something else at {wrong}"
            )
            if down and len(present) > 1:
                doubles.append(seen)
            if not down and not present:
                misses.append(seen)
            if wrong:
                torn.append(seen)
            if present == [len(keys) - 1]:
                break
            if time.monotonic() > deadline:
                cut_off = True
                break
    return ChainWatch(sweeps, tuple(doubles), tuple(misses), tuple(torn), cut_off)
