"""Clauses on housekeeping: remove_orphans, delete_prefix edge cases and the side effects of emptying a prefix.

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` and ``sizes`` fixtures the
clauses use. What they pin down, on every backend:

* ``remove_orphans`` reclaims crash leftovers and nothing else: never a write in flight (whatever
  ``min_age_s``, 0 included), never an object (names containing ``#`` included), nothing younger than
  ``min_age_s``. Where no writer crashed it finds nothing. Where ``capabilities.reclaims_orphans``, a
  writer killed with SIGKILL mid-write leaves leftovers that it does reclaim; elsewhere it returns 0.
* Listings never show what a write in flight stages: no key that was not written, no prefix without an
  object below it.
* ``delete_prefix`` takes whole segments and refuses the root (``""``, ``"/"``), deleting nothing; an
  emptied prefix is no longer listed and an adapter rooted there answers as an empty one.
* A prefix emptied by any mix of deletes, renames and failed conditional or streamed writes leaves
  nothing behind: nothing listed, and an object can be written under the prefix's own name (on a file
  system, an empty directory left behind would refuse it). That is how a directory left on disk shows
  through the API, on every backend alike.

That a ``file://`` target's own root directory survives being emptied is not visible here (the clauses'
adapters are children, whose directories are pruned like any prefix): ``tests/test_local_files.py``
checks it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import pytest

from contract_tests.bodies import describe, make_body
from contract_tests.concurrency_clauses import require_processes
from contract_tests.plugin import ContractSizes
from contract_tests.races import SPAWN, Sync, race_in_processes, race_in_threads
from contract_tests.verdicts import Violation
from storage_adapter.errors import NotFoundError, StorageError, UnsupportedOperationError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import DirListing, ObjectInfo

T = TypeVar("T")

# A write of this size stages its bytes for milliseconds (longer where it is synced): long enough for a
# sweep or a listing running beside it to meet it every run.
IN_FLIGHT_BODY_SIZE = 1 << 20
# Killed writers: threads writing bodies this large are mostly mid-write, so a kill (SETTLE_S after each
# wrote once) nearly always leaves a leftover where a backend can; CRASHES kills make it certain.
CRASH_WRITERS = 6
CRASH_BODY_SIZE = 2 << 20
SETTLE_S = 0.05
CRASHES = 5
# Valid names containing '#' (only '#<digits>' at the end of a segment is reserved), some shaped to
# catch a staging-name test that is looser than the exact '<name>#<12 digits>'.
HASH_NAMES = (
    "a#b1",
    "#12x",
    "x#",
    "#",
    "##",
    "k#123456789012x",
    "k#abcdefghijkl",
    "k#²",
    "k# 1",
    "k#1.5",
    "d#1x/k",
    "d#/k#-1",
)


def _raising_stream() -> Iterator[bytes]:
    """A streamed body that fails after its first chunk."""
    yield b"a first chunk"
    raise RuntimeError("the producer failed")


def _refused_names(adapter: StorageAdapter, keys: list[str]) -> list[str]:
    """For the evidence: each directory name on the paths of ``keys`` (deepest first) that an object
    cannot be written at, with the error, each name written and deleted again when it can be."""
    names = sorted({key.rsplit("/", n)[0] for key in keys for n in range(1, key.count("/") + 1)}, key=len)
    refused = []
    for name in reversed(names):
        try:
            adapter.write(name, b"probe")
        except StorageError as exc:
            refused.append(f"  a write of {name!r} is refused: {type(exc).__name__}: {str(exc)[:160]}")
        else:
            adapter.delete(name)
    return refused


def _sweeping(work: Callable[[], T], sweep: Callable[[], object]) -> T:
    """Run ``work`` in a thread while this one calls ``sweep`` over and over (at least once) until
    ``work`` is done; return ``work``'s result or raise its exception."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as exc:  # re-raised below, in the clause's thread
            errors.append(exc)

    worker = threading.Thread(target=run, name="housekeeping-work", daemon=True)
    worker.start()
    while True:
        sweep()
        if not worker.is_alive():
            break
    worker.join()
    if errors:
        raise errors[0]
    return results[0]


@dataclass
class WriteTally:
    """What one writer had acknowledged (key -> tag of its last body) and every call that failed."""

    acked: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def write_create_cas(adapter: StorageAdapter, rounds: int, index: int, sync: Sync) -> WriteTally:
    """Race task: writer ``index``, alone on its keys ``w<index>/...``, runs per round a write, a create of
    a fresh key and a CAS with the token its write returned, all with IN_FLIGHT_BODY_SIZE bodies. Each
    must succeed: nothing else touches these keys."""
    tally, plain = WriteTally(), f"w{index}/plain"
    sync()
    for r in range(rounds):
        step = "write"
        try:
            token = adapter.write(plain, make_body(f"{plain}-{r}", IN_FLIGHT_BODY_SIZE))
            tally.acked[plain] = f"{plain}-{r}"
            step, fresh = "write_if_absent", f"w{index}/new-{r}"
            if adapter.write_if_absent(fresh, make_body(fresh, IN_FLIGHT_BODY_SIZE)) is not None:
                tally.acked[fresh] = fresh
            else:
                tally.failures.append(f"write_if_absent({fresh!r}) of a fresh key returned None")
            step, tag = "write_if_match", f"{plain}-{r}-cas"
            if adapter.write_if_match(plain, make_body(tag, IN_FLIGHT_BODY_SIZE), token) is None:
                tally.failures.append(f"write_if_match({plain!r}) with its own write's token returned None")
            else:
                tally.acked[plain] = tag
        except StorageError as exc:
            tally.failures.append(f"round {r}, {step}: {type(exc).__name__}: {exc}")
    return tally


def _assert_sweeps_spared_writes(adapter: StorageAdapter, run: Callable[[], list[WriteTally]]) -> None:
    """Run the writers with ``run`` while remove_orphans(min_age_s=0) sweeps the adapter, then judge."""
    removed: list[int] = []
    tallies = _sweeping(run, lambda: removed.append(adapter.remove_orphans(min_age_s=0)))
    failures = [failure for tally in tallies for failure in tally.failures]
    acked = {key: tag for tally in tallies for key, tag in tally.acked.items()}
    lost = [
        f"{key}: {'gone' if data is None else 'not its last acknowledged body'}"
        for key, tag in sorted(acked.items())
        if (data := adapter.read_if_exists(key)) != make_body(tag, IN_FLIGHT_BODY_SIZE)
    ]
    listed = [info.key for info in adapter.list()]
    if failures or lost or any(removed) or listed != sorted(acked):
        raise Violation(
            "remove_orphans(min_age_s=0) running beside writers broke writes in flight or reclaimed "
            "something no crash left",
            "\n".join(
                [
                    f"{len(removed)} sweeps reclaimed {sum(removed)} (no writer crashed: expected 0)",
                    f"listed {listed[:12]}, acknowledged {sorted(acked)[:12]}",
                    *[f"failed: {f}" for f in failures[:10]],
                    *[f"lost: {x}" for x in lost[:10]],
                ]
            ),
        )


def crash_body(writer: int) -> bytes:
    """The body killed writer ``writer`` writes, every time."""
    return make_body(f"crash-{writer}", CRASH_BODY_SIZE)


def write_until_killed(adapter: StorageAdapter, prefix: str, writers: int) -> None:
    """A process body: ``writers`` threads, thread ``w`` creating ``<prefix>/<w>/<n>`` for n = 0, 1, ...
    with its crash body and then deleting the previous one, forever (the clause kills the process).
    Fresh keys keep a writer mid-write most of the time: replacing a large file costs a filesystem more
    in the rename than in the write."""

    def loop(writer: int) -> None:
        body, previous, n = crash_body(writer), "", 0
        while True:
            key = f"{prefix}/{writer}/{n}"
            adapter.write(key, body)
            if previous:
                adapter.delete(previous)
            previous, n = key, n + 1

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _kill_mid_write(adapter: StorageAdapter, prefix: str, writers: int, timeout_s: float = 60.0) -> None:
    """Start write_until_killed in a spawned process, wait until each of its writers has written once
    (each is then in its loop, mostly mid-write), and kill it with SIGKILL."""
    process = SPAWN.Process(target=write_until_killed, args=(adapter, prefix, writers), name="killed-writer")
    process.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not all(adapter.list(f"{prefix}/{w}") for w in range(writers)):
            if not process.is_alive() or time.monotonic() > deadline:
                raise AssertionError(
                    f"the writer process {'died' if not process.is_alive() else 'wrote nothing'} "
                    f"before it could be killed mid-write (exit code {process.exitcode})"
                )
            time.sleep(0.005)
        time.sleep(SETTLE_S)
    finally:
        process.kill()
        process.join()


def _by_writer(
    adapter: StorageAdapter, prefix: str, writers: int
) -> tuple[list[list[ObjectInfo]], list[str]]:
    """The objects listed under ``prefix``: each writer's, oldest first, and the keys no writer wrote."""
    mine: list[list[ObjectInfo]] = [[] for _ in range(writers)]
    stray = []
    for info in adapter.list(prefix):
        writer, _, n = info.key[len(prefix) + 1 :].partition("/")
        if writer.isdecimal() and int(writer) < writers and n.isdecimal():
            mine[int(writer)].append(info)
        else:
            stray.append(info.key)
    return [sorted(infos, key=lambda i: int(i.key.rsplit("/", 1)[1])) for infos in mine], stray


def _judge_crash(adapter: StorageAdapter, prefix: str, writers: int, declared: bool) -> int:
    """What a crash left under ``prefix``, judged: each writer's last object or two listed, whole, nothing
    else listed; leftovers spared by a one-minute min_age_s, then reclaimed by one sweep (at most one per
    writer, none if not ``declared``) and nothing by a second. The sweeps keep each writer's newest object
    as it was: a request the writer sent before it died may still land (S3), but its newest object is
    deleted only after a newer one was written. Returns how many the sweep reclaimed."""
    before, stray = _by_writer(adapter, prefix, writers)
    problems = [
        f"writer {w} left {len(infos)} objects listed, expected its last one or two: {[i.key for i in infos]}"
        for w, infos in enumerate(before)
        if not 1 <= len(infos) <= 2
    ]
    problems += [f"listed {key!r}, which no writer wrote" for key in stray]
    problems += [
        f"{info.key}: not the body its writer wrote ({len(data)} bytes, listed as {info.size})"
        for w, infos in enumerate(before)
        for info in infos
        # None: deleted since, by a request the writer sent before it died
        if (data := adapter.read_if_exists(info.key)) is not None
        and (data != crash_body(w) or len(data) != info.size)
    ]
    young = adapter.remove_orphans(min_age_s=60.0)
    reclaimed = adapter.remove_orphans(min_age_s=0.0)
    again = adapter.remove_orphans(min_age_s=0.0)
    after, stray = _by_writer(adapter, prefix, writers)
    high = writers if declared else 0
    if young:
        problems.append(f"remove_orphans(min_age_s=60) reclaimed {young} leftovers seconds old")
    if not 0 <= reclaimed <= high:
        problems.append(
            f"remove_orphans(min_age_s=0) reclaimed {reclaimed}, expected 0 to {high} "
            f"(capabilities.reclaims_orphans is {declared}; {writers} writers were killed)"
        )
    if again:
        problems.append(f"a second remove_orphans(min_age_s=0) reclaimed {again} more")
    problems += [f"listed {key!r} after the sweeps, which no writer wrote" for key in stray]
    problems += [
        f"the sweeps removed or changed {infos[-1].key}, writer {w}'s newest object"
        for w, infos in enumerate(before)
        if infos and (infos[-1].key, infos[-1].token) not in {(i.key, i.token) for i in after[w]}
    ]
    if problems:
        raise Violation(
            "a writer killed mid-write left visible or misreclaimed leftovers", "\n".join(problems)
        )
    return reclaimed


class HousekeepingClauses:
    """Clauses on housekeeping."""

    # -- remove_orphans ------------------------------------------------------------------------------------
    def test_remove_orphans_spares_writes_in_flight_threads(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """remove_orphans(min_age_s=0), run over and over while threads write, create and CAS 1 MiB
        bodies, breaks no write: every call succeeds, every acknowledged body is intact and listed, and
        the sweeps reclaim nothing (no writer crashed)."""
        racers = max(2, sizes.threads // 2)
        _assert_sweeps_spared_writes(
            adapter, lambda: race_in_threads(racers, partial(write_create_cas, adapter, 3))
        )

    @pytest.mark.storage_contract_processes
    def test_remove_orphans_spares_writes_in_flight_processes(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """The same with the writers in other processes: a sweep here never breaks their writes."""
        require_processes(adapter)
        _assert_sweeps_spared_writes(
            adapter, lambda: race_in_processes(2, partial(write_create_cas, adapter, 2))
        )

    def test_remove_orphans_never_removes_objects(self, adapter: StorageAdapter) -> None:
        """remove_orphans removes no object, whatever min_age_s (0: every object is old enough): not one
        whose name contains '#' (only '#<digits>' ending a segment is reserved), at any depth, also from
        a child adapter; with no crash behind it, it finds nothing and returns the int 0."""
        keys = [*HASH_NAMES, *(f"deep/er/{name}" for name in HASH_NAMES)]
        before = {key: adapter.write(key, make_body(key, 64)) for key in keys}
        counts = {
            f"{who}.remove_orphans(min_age_s={age:g})": target.remove_orphans(min_age_s=age)
            for who, target in (("adapter", adapter), ("child 'd#1x'", adapter.child("d#1x")))
            for age in (3600.0, 0.0)
        }
        after = {info.key: info.token for info in adapter.list()}
        wrong = {call: n for call, n in counts.items() if type(n) is not int or n != 0}
        gone = sorted(set(before) - set(after))
        changed = sorted(k for k in before if k in after and after[k] != before[k])
        if wrong or gone or changed or set(after) != set(before):
            raise Violation(
                "remove_orphans removed or changed objects, or reclaimed something no crash left",
                f"counts (expected the int 0): {wrong or counts}\nobjects gone: {gone}\n"
                f"objects changed: {changed}\nlisted but never written: {sorted(set(after) - set(before))}",
            )

    @pytest.mark.storage_contract_processes
    def test_crash_leftovers_are_invisible_and_reclaimed(self, adapter: StorageAdapter) -> None:
        """A process killed with SIGKILL while its threads write 2 MiB bodies leaves each key whole and
        lists nothing else. Its leftovers are younger than a minute, so remove_orphans(min_age_s=60)
        reclaims nothing; remove_orphans(0) then reclaims at most one per writer, a second sweep nothing,
        and no object changes. Where capabilities.reclaims_orphans, some of up to CRASHES such crashes
        leaves leftovers that remove_orphans(0) reclaims; elsewhere it always returns 0."""
        require_processes(adapter)  # a killed process takes a per-process store with it
        declared = adapter.capabilities.reclaims_orphans
        reclaimed: list[int] = []
        while len(reclaimed) < (CRASHES if declared else 1) and not sum(reclaimed):
            prefix = f"crash-{len(reclaimed)}"  # each writer in a directory of its own: no shared lock
            _kill_mid_write(adapter, prefix, CRASH_WRITERS)
            reclaimed.append(_judge_crash(adapter, prefix, CRASH_WRITERS, declared))
        if declared and not sum(reclaimed):
            raise Violation(
                "writers killed mid-write left nothing for remove_orphans to reclaim, though "
                "capabilities.reclaims_orphans is True",
                f"{len(reclaimed)} processes of {CRASH_WRITERS} writers each were killed mid-write; "
                "remove_orphans(min_age_s=0) returned 0 after each",
            )

    # -- listings while writes are in flight -----------------------------------------------------------------
    def test_listings_never_show_a_write_in_flight(self, adapter: StorageAdapter) -> None:
        """While 1 MiB bodies are written (replacing two objects, and creating one in a new prefix each
        time), list(), iter_list() and list_dir() show only keys that are written, of a whole body's size, and a prefix
        only when an object is below it (nothing is deleted here, so list(prefix) is not empty after);
        what a write stages is no other tool's entry either: skipped() and list_dir().skipped report
        nothing."""
        rounds = 8
        keys = {f"flat-{r % 2}" for r in range(rounds)} | {f"fresh-{r}/obj" for r in range(rounds)}
        seen: list[str] = []

        def write() -> None:
            for r in range(rounds):
                adapter.write(f"flat-{r % 2}", make_body(f"flat-{r}", IN_FLIGHT_BODY_SIZE))
                adapter.write(f"fresh-{r}/obj", make_body(f"fresh-{r}", IN_FLIGHT_BODY_SIZE))

        def look() -> None:
            listing = adapter.list_dir()
            for info in [*adapter.list(), *adapter.iter_list(), *listing.objects]:
                if info.key not in keys or info.size != IN_FLIGHT_BODY_SIZE:
                    seen.append(f"listed {info.key!r} of {info.size} bytes")
            seen.extend(
                f"list_dir() reported the prefix {prefix!r} with no object below it"
                for prefix in listing.prefixes
                if f"{prefix}/obj" not in keys or not adapter.list(prefix)
            )
            seen.extend(
                f"reported {entry.name!r} as skipped ({entry.reason.value})"
                for entry in [*adapter.skipped(), *listing.skipped]
            )

        _sweeping(write, look)
        if seen:
            raise Violation(
                "a listing showed what a write in flight stages", "\n".join(sorted(set(seen))[:20])
            )

    # -- emptied prefixes -------------------------------------------------------------------------------------
    def test_an_emptied_prefix_leaves_nothing_behind(self, adapter: StorageAdapter) -> None:
        """However the objects under a prefix go, and whatever fails there, nothing is left where they
        were. Under ``t``: objects deleted one by one at several depths and with delete_many, renamed out
        of the prefix and deeper into it (then deleted), a write_if_match of an absent key in a new
        directory (None), renames of a missing source whose directory is absent or present
        (NotFoundError), streamed conditional writes that lose, and a streamed write that fails. Then
        list('t') and list_dir('t') are empty, list_dir('') does not report 't', and a write of an
        object named 't' (the name of every directory those operations touched, or of their parent)
        succeeds and reads back: on a file system, a directory left behind would refuse it, and the
        tree would grow with every such operation."""
        keys = ["t/a/b/c/1", "t/a/b/2", "t/a/x/3", "t/d/e/4", "t/h/5", "t/s/6", "t/p2/7", "t/k/8"]
        never_written = ["t/m/n/k", "t/u/v/k", "t/r/s/k", "t/r2/s/k", "t/w/y/k"]
        tokens = {key: adapter.write(key, key) for key in keys}
        adapter.write("kept", b"outside the prefix")
        failed: dict[str, Callable[[], object]] = {
            "write_if_match('t/m/n/k') of an absent key": lambda: adapter.write_if_match(
                "t/m/n/k", b"x", tokens["t/h/5"]
            ),
            "streamed write_if_match('t/u/v/k') of an absent key": lambda: adapter.write_if_match(
                "t/u/v/k", iter([b"x"]), tokens["t/h/5"]
            ),
            "streamed write_if_absent('t/k/8') of a present key": lambda: adapter.write_if_absent(
                "t/k/8", iter([b"x"])
            ),
            "rename('t/p/q/missing', 't/r/s/k'), no source directory": lambda: adapter.rename(
                "t/p/q/missing", "t/r/s/k"
            ),
            "rename('t/p2/missing', 't/r2/s/k'), the source's directory present": lambda: adapter.rename(
                "t/p2/missing", "t/r2/s/k"
            ),
            "a streamed write('t/w/y/k') that raises": lambda: adapter.write("t/w/y/k", _raising_stream()),
        }
        problems = []
        for what, call in failed.items():
            try:
                answer = call()
            except (NotFoundError, UnsupportedOperationError, RuntimeError):
                continue  # the failure each may answer (a streamed CAS may be refused by capabilities)
            if answer is not None:
                problems.append(f"{what} answered {answer!r}, not None or an error")
        adapter.delete("t/a/b/c/1")  # its directory is emptied; its parent is not
        adapter.delete("t/a/b/2")
        adapter.delete_many(["t/a/x/3", "t/k/8"])
        adapter.rename("t/d/e/4", "out/4")  # out of the prefix
        adapter.rename("t/h/5", "t/h/i/j/5")  # deeper, then deleted
        adapter.delete("t/h/i/j/5")
        adapter.rename("t/s/6", "t/s/6b")  # beside itself, then deleted
        adapter.delete("t/s/6b")
        adapter.delete("t/p2/7")
        listing = adapter.list_dir("t")
        if adapter.list("t") or listing.objects or listing.prefixes:
            problems.append(f"'t' still lists {adapter.list('t')} / {listing}")
        if "t" in adapter.list_dir("").prefixes:
            problems.append(f"list_dir('') reports the emptied prefix 't': {adapter.list_dir('')}")
        try:
            adapter.write("t", b"named like the emptied prefix")
            if adapter.read_bytes("t") != b"named like the emptied prefix":
                problems.append("an object written at 't' does not read back")
            adapter.delete("t")
        except StorageError as exc:
            problems.append(f"write('t') after 't' was emptied: {exc!r}")
            problems += _refused_names(adapter, [*keys, *never_written])
        if problems:
            raise Violation("an emptied prefix left something behind", "\n".join(problems))

    # -- delete_prefix ---------------------------------------------------------------------------------------
    def test_delete_prefix_refuses_the_root(self, adapter: StorageAdapter) -> None:
        """delete_prefix('') and delete_prefix('/') (the whole root) raise StorageError and delete nothing,
        neither under the adapter nor beside it; a child adapter refuses its own root the same way."""
        keys = ["a/x", "a/y/z", "ab/x", "top"]
        for key in keys:
            adapter.write(key, key)
        accepted = []
        for who, target in (("adapter", adapter), ("child 'a'", adapter.child("a"))):
            for root in ("", "/"):
                with contextlib.suppress(StorageError):
                    accepted.append(f"{who}.delete_prefix({root!r}) returned {target.delete_prefix(root)!r}")
        remaining = [info.key for info in adapter.list()]
        if accepted or remaining != keys:
            raise Violation(
                "delete_prefix did not refuse the root",
                "\n".join([*accepted, f"remaining {remaining}, written {keys}"]),
            )

    def test_delete_prefix_takes_whole_segments_and_leaves_no_trace(self, adapter: StorageAdapter) -> None:
        """delete_prefix('d/a') (or 'd/a/', or 'a' from a child at 'd') deletes 'd/a/...' only: never
        'd/ab/x', 'd/a.txt', 'd/a b/x', nor an object named like the prefix ('d/k' for 'd/k'). Once
        emptied, the prefix is not listed, and an adapter rooted there answers as an empty one."""
        kept = ["d/a b/x", "d/a.txt", "d/ab/x", "d/k", "d/kk/x"]
        for key in [*kept, "d/a/1", "d/a/2/3"]:
            adapter.write(key, key)
        emptied = adapter.child("d/a")
        token = emptied.read_versioned("1").token
        counts = {
            "d/k": adapter.delete_prefix("d/k"),
            "d/a/": adapter.delete_prefix("d/a/"),
            "a (child 'd')": adapter.child("d").delete_prefix("a"),
        }
        remaining = [info.key for info in adapter.list()]
        problems = []
        if counts != {"d/k": 0, "d/a/": 2, "a (child 'd')": 0} or remaining != kept:
            problems.append(f"deleted counts {counts}; remaining {remaining}, expected {kept}")
        if "d/a" in adapter.list_dir("d").prefixes:
            problems.append("list_dir('d') still reports the emptied prefix 'd/a'")
        emptied.delete("1")  # idempotent: no error
        answers: dict[str, tuple[object, object]] = {
            "list()": (emptied.list(), []),
            "list_dir()": (emptied.list_dir(), DirListing(objects=(), prefixes=())),
            "read_if_exists('1')": (emptied.read_if_exists("1"), None),
            "write_if_match('1', old token)": (emptied.write_if_match("1", b"resurrected", token), None),
            "remove_orphans(0)": (emptied.remove_orphans(min_age_s=0), 0),
        }
        problems += [
            f"{name} -> {describe(got)}, expected {describe(want)}"
            for name, (got, want) in answers.items()
            if got != want
        ]
        with contextlib.suppress(NotFoundError):
            emptied.rename("1", "2")
            problems.append("rename('1', '2') of a deleted object succeeded")
        emptied.write("again", b"v")
        if emptied.read_bytes("again") != b"v":
            problems.append("a write into the emptied prefix does not read back")
        if problems:
            raise Violation("delete_prefix crossed a segment or left a trace", "\n".join(problems))
