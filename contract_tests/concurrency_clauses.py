"""Clauses on races around delete, rename and directory pruning, on the errors a race may raise, and on what
a process sees of another (capability truthfulness).

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` and ``sizes`` fixtures the
clauses use.

The races are planned (:func:`contract_tests.race_tasks.planned_race`): each round, every racer writes its
setup, all meet at a barrier, then each makes one call. The calls of a round that share keys form one
race, judged on its own against a serial model: some interleaving of their steps must explain every
answer and the state the keys are left in. A ``rename`` is one step where ``capabilities.atomic_rename``;
elsewhere it is a copy then a delete, and a copy is itself a read then a write (three steps). Every error
is judged too: an answer that is none of the call's outcomes (a plain StorageError, NotFoundError from a
write, PermissionDeniedError, ...) is a violation naming it; a transient BackendUnavailableError leaves
its race undecided (inconclusive, never a pass).

Readers and listings take no lock, so they race renames differently: watchers sweep a chain of keys an
object is renamed along (:func:`contract_tests.race_tasks.renames_watched`) and judge what each sweep
saw by the order it looked in, which needs no model of the renames' steps.

Sizes: a burst of racers released together lands inside a race window of microseconds often, but not
every time. The rounds below were measured on local, where every lock is a flock and a missing one shows
only when a call lands inside another's critical section: each bug they target (the mutants in the
issue's catalogue) is caught in every run, with a margin, while the module adds about 1.5 s on local.
Racing deletes are lined up behind a write holding their directory's lock, which turns a window of
microseconds into one of milliseconds; a copy-then-unlink rename is seen under two keys in about one
sweep down the chain in seven.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import partial

import pytest

from contract_tests import race_tasks
from contract_tests.bodies import body_is_whole, describe, make_body
from contract_tests.history import Outcome
from contract_tests.plugin import ContractSizes
from contract_tests.race_tasks import Call, Move, planned_race
from contract_tests.races import RaceTimeout, race_in_processes, race_in_threads
from contract_tests.verdicts import Inconclusive, Violation
from storage_adapter.protocol import StorageAdapter

# Rounds of each planned race (see the module docstring for how they were sized).
CAS_RACE_ROUNDS = 8
# The longest stagger of a write/delete behind the CAS it races: about a local CAS's critical section.
CAS_RACE_STAGGER_S = 0.0015
PRUNE_RACE_ROUNDS = 40
# Racing deletes: few rounds of groups side by side, because SeaweedFS holds each delete of a key that
# another delete of it is in, for a second or two; each group hits its window on local nearly every time.
DELETE_RACE_ROUNDS = 2
DELETE_RACE_GROUP = 4
# The sibling written beside racing deletes, and how long the deletes wait for that write to start.
DELETE_RACE_SIBLING_SIZE = 256 * 1024
DELETE_RACE_DELAY_S = 0.0005
RENAME_CAS_ROUNDS = 16
RENAME_WATCH_ROUNDS = 8
RENAME_WATCHERS = 3
CROSSING_RACERS = 4
# A deadlock needs renames that each hold one lock while taking another: atomic renames. Elsewhere a
# rename is two separate single-key calls, so one round of each pattern checks the outcomes (and a server
# may take a second over each conflicting copy: SeaweedFS does).
CROSSING_RENAME_ROUNDS = 20
CROSSING_RENAME_ROUNDS_NOT_ATOMIC = 2
# Crossing renames that have not finished by then are deadlocked: the racers are killed (processes) or
# abandoned (threads) and the clause fails. Generous, as only a deadlock may reach it: the bursts (spawned
# racers included) take about 1 s on local, 5-6 s on SeaweedFS and 7-11 s on Azurite here, and took 20.5 s
# on Azurite with three test workers on the two loaded cores (a copy and a Blob Batch delete per rename,
# served by one Node.js thread), which failed the clause at the 20 s this was.
CROSSING_RENAME_DEADLINE_S = 60.0
# Rename bursts: racers x renames each. Two directories locked in argument order deadlock 5 of 5 runs of
# the clause at 4 x 60 (barrier-paced single renames, above, almost never do).
BURST_RACERS = 4
BURST_RENAMES = 60
_BODY = 64
# How much of a failed race the evidence shows.
_SHOWN = 8

Plan = tuple[tuple[Move | None, ...], ...]
# The model's object: its bytes and the key whose setup wrote it, or "" once it was moved, copied or
# rewritten (a write_if_match with the setup's token then no longer matches it).
_Version = tuple[bytes, str]


# -- capability truthfulness -------------------------------------------------------------------------------
def _probe_child(
    adapter: StorageAdapter, parent_key: str, child_key: str, body: bytes, _i: int, _s: object
) -> bool:
    """In a spawned process: write ``body`` at ``child_key``; say whether ``parent_key`` holds ``body``."""
    adapter.write(child_key, body)
    return adapter.read_if_exists(parent_key) == body


_SHARING: dict[tuple[str, object], tuple[bool, str]] = {}


def observed_sharing(adapter: StorageAdapter) -> tuple[bool, str]:
    """Whether a spawned process and this one see one store, as observed (never as declared): each writes
    an object the other must read. Returns the answer and what was seen. A store seen from one side only
    is a Violation. Probed once per backend and declared capabilities in a session (a spawn costs ~0.5 s)."""
    cache_key = (type(adapter).__qualname__, adapter.capabilities)
    if cache_key not in _SHARING:
        probe = adapter.child(f"sharing-probe-{uuid.uuid4().hex[:8]}")
        body = make_body(f"sharing-{uuid.uuid4().hex}", _BODY)
        probe.write("parent", body)
        try:
            [child_saw] = race_in_processes(1, partial(_probe_child, probe, "parent", "child", body))
            here_saw = probe.read_if_exists("child") == body
        finally:
            probe.delete("parent")
            probe.delete("child")
        seen = (
            f"a spawned process {'saw' if child_saw else 'did not see'} an object written here, and this "
            f"process {'saw' if here_saw else 'did not see'} the object it wrote"
        )
        if child_saw != here_saw:
            raise Violation("processes see the store one way only", seen)
        _SHARING[cache_key] = (child_saw, seen)
    return _SHARING[cache_key]


def require_processes(adapter: StorageAdapter) -> None:
    """Skip a process clause where the store is per-process, once that is observed, not just declared;
    a store declared per-process that another process does see is a Violation, never a skip."""
    caps = adapter.capabilities
    if caps.shared_across_processes:
        return
    shared, seen = observed_sharing(adapter)
    if shared:
        raise Violation(
            f"{caps.backend} declares shared_across_processes=False, but its store is shared: the process "
            "clauses would be skipped on a false declaration",
            seen,
        )
    pytest.skip(f"{caps.backend} stores are per-process (declared, and observed: {seen})")


# -- judging planned races ---------------------------------------------------------------------------------
def _apply(
    move: Move, step: int, state: dict[str, _Version], atomic: bool, slot: str
) -> tuple[str | None, bool]:
    """Apply step ``step`` of ``move`` to ``state`` (in place); return its answer (None for a step that
    answers nothing) and whether the move is complete. A rename is one step where ``atomic``; else three:
    read the source (or find it absent) into ``slot``, write it at the target, delete the source (a
    server-side copy is itself a read then a write)."""
    if move.op == "write":
        state[move.key] = (move.body, "")
        return "ok", True
    if move.op == "delete":
        state.pop(move.key, None)
        return "ok", True
    if move.op == "write_if_match":
        if state.get(move.key) != (move.setup, move.key):
            return "lost", True
        state[move.key] = (move.body, "")
        return "won", True
    if step == 1:
        state[move.target] = state.pop(slot)
        return None, False
    if step == 2:
        state.pop(move.key, None)
        return None, True
    if move.key not in state:
        return "absent", True
    moved = (state[move.key][0], "")
    if atomic:
        del state[move.key]
        state[move.target] = moved
    else:
        state[slot] = moved
    return "moved", atomic


def _explained(
    calls: Sequence[Call], initial: dict[str, _Version], final: dict[str, bytes | None], atomic: bool
) -> bool:
    """Whether some interleaving of the calls' steps, applied to ``initial``, gives every call its
    observed answer and leaves ``final``."""
    steps = [3 if c.move.op == "rename" and not atomic else 1 for c in calls]
    seen: set[tuple[tuple[int, ...], frozenset[tuple[str, _Version]]]] = set()

    def search(positions: tuple[int, ...], state: dict[str, _Version]) -> bool:
        if all(p == n for p, n in zip(positions, steps, strict=True)):
            return all(state.get(key, (None, ""))[0] == body for key, body in final.items())
        memo = (positions, frozenset(state.items()))
        if memo in seen:
            return False
        seen.add(memo)
        for i, call in enumerate(calls):
            if positions[i] == steps[i]:
                continue
            after = dict(state)
            answer, complete = _apply(call.move, positions[i], after, atomic, f"\0in flight {i}")
            if answer is not None and answer != call.result:
                continue
            moved = (*positions[:i], steps[i] if complete else positions[i] + 1, *positions[i + 1 :])
            if search(moved, after):
                return True
        return False

    return search(tuple(0 for _ in calls), initial)


def _keys(moves: Iterable[Move | None]) -> set[str]:
    return {k for m in moves if m is not None for k in (m.key, m.target) if k}


def _groups(moves: Sequence[Move | None]) -> list[set[int]]:
    """The racers of one round, grouped by the keys their moves share (transitively): each group is judged
    on its own, as calls on disjoint keys commute."""
    groups: list[tuple[set[int], set[str]]] = []
    for racer, move in enumerate(moves):
        if move is None:
            continue
        racers, keys = {racer}, _keys([move])
        for group in [g for g in groups if g[1] & keys]:
            groups.remove(group)
            racers |= group[0]
            keys |= group[1]
        groups.append((racers, keys))
    return [racers for racers, _ in groups]


def run_planned(
    adapter: StorageAdapter, plan: Plan, *, processes: bool = False, timeout_s: float | None = None
) -> None:
    """Run ``plan`` (threads, or spawned processes), then judge it: every error that is not an outcome is a
    Violation naming it; every round must be explained by the serial model (see the module docstring);
    a round with a transient error is undecided, and makes the clause Inconclusive if nothing failed."""
    task = partial(planned_race, adapter, plan)
    runner = race_in_processes if processes else race_in_threads
    racers = len(plan[0])
    answers = runner(racers, task) if timeout_s is None else runner(racers, task, timeout_s)
    calls = [call for mine in answers for call in mine]
    final = {key: adapter.read_if_exists(key) for moves in plan for key in _keys(moves)}
    atomic = adapter.capabilities.atomic_rename
    errors = [c for c in calls if c.error is not None]
    transient = [c for c in errors if c.outcome is Outcome.UNKNOWN]
    problems = []
    wrong = [c for c in errors if c.outcome is not Outcome.UNKNOWN]
    if wrong:
        kinds = Counter((c.error or "").split(":", 1)[0] for c in wrong)
        problems.append(
            f"{len(wrong)} call(s) raised an error that is not an outcome of the call "
            f"({', '.join(f'{k} x{n}' for k, n in kinds.most_common())}):"
        )
        problems += [f"  {c.describe()}" for c in wrong[:_SHOWN]]
    unexplained, judged = _unexplained(plan, calls, final, atomic)
    if unexplained:
        renames = any(m is not None and m.op == "rename" for moves in plan for m in moves)
        model = (" (renames atomic)" if atomic else " (renames as read, write, delete)") if renames else ""
        problems.append(f"{len(unexplained)} of {judged} races have no serial explanation{model}:")
        problems += unexplained[:_SHOWN]
    if problems:
        raise Violation(problems[0].rstrip(":"), "\n".join(problems))
    if transient:
        raise Inconclusive(
            f"{len(transient)} call(s) failed transiently, so their races are undecided; no violation seen",
            "\n".join(c.describe() for c in transient[:_SHOWN]),
        )


def _unexplained(
    plan: Plan, calls: Sequence[Call], final: dict[str, bytes | None], atomic: bool
) -> tuple[list[str], int]:
    """The races (groups of calls on shared keys, one round) the serial model cannot explain, each as the
    evidence lines of its calls and the state they left; and how many races were judged (those where a
    call raised are not: their errors are the verdict)."""
    unexplained, judged = [], 0
    for round_, moves in enumerate(plan):
        for members in _groups(moves):
            mine = [c for c in calls if c.round == round_ and c.racer in members]
            if any(c.error is not None for c in mine):
                continue
            judged += 1
            group = [m for i, m in enumerate(moves) if i in members and m is not None]
            initial = {m.key: (m.setup, m.key) for m in group if m.setup is not None}
            ends = {key: final[key] for key in _keys(group)}
            if not _explained([c for c in mine if not c.setup], initial, ends, atomic):
                left = "; ".join(f"{k}={_short(v)}" for k, v in sorted(ends.items()))
                unexplained.append("\n".join([*(f"  {c.describe()}" for c in mine), f"  left: {left}"]))
    return unexplained, judged


def _short(body: bytes | None) -> str:
    """A body left by a race: absent, its tag when it is one of the race's whole bodies, else described."""
    if body is None:
        return "absent"
    return repr(body.split(b"|", 1)[0].decode()) if body_is_whole(body) else describe(body)


def _body(tag: str) -> bytes:
    return make_body(tag, _BODY)


# -- the plans ---------------------------------------------------------------------------------------------
def cas_race_plan(pairs: int, rounds: int) -> Plan:
    """Pairs of racers on keys of their own: racer 2p writes a base version, then CASes it with the base's
    token while racer 2p+1 writes or deletes it (alternating by round and pair), released together or up
    to ``CAS_RACE_STAGGER_S`` later (by round), so that a delete faster than the CAS's way to its compare
    also lands between its compare and its publish."""
    plan = []
    for r in range(rounds):
        row: list[Move | None] = []
        delay = CAS_RACE_STAGGER_S * (r % 4) / 3
        for p in range(pairs):
            key = f"cas-race/p{p}/r{r}"
            row.append(Move("write_if_match", key, _body(f"{key}-cas"), setup=_body(f"{key}-base")))
            if (p + r) % 2:
                row.append(Move("delete", key, delay_s=delay))
            else:
                row.append(Move("write", key, _body(f"{key}-plain"), delay_s=delay))
        plan.append(tuple(row))
    return tuple(plan)


def prune_race_plan(cells: int, rounds: int) -> Plan:
    """Cells of two racers: one deletes the only object under ``prune/r<round>/c<cell>/d`` (so the delete
    prunes ``d`` and its parent), the other writes into ``d``, or (alternating) into its sibling ``e``,
    whose parent the delete prunes. One delete per directory: its prune races the write that waited for
    the directory's lock, rather than the writes of other deleters."""
    plan = []
    for r in range(rounds):
        row: list[Move | None] = []
        for c in range(cells):
            cell = f"prune/r{r}/c{c}"
            written = f"{cell}/{'d' if (r + c) % 2 else 'e'}/w"
            row += [
                Move("delete", f"{cell}/d/z", setup=_body(f"{cell}/z")),
                Move("write", written, _body(written)),
            ]
        plan.append(tuple(row))
    return tuple(plan)


def delete_race_plan(groups: int, rounds: int) -> Plan:
    """Groups of DELETE_RACE_GROUP racers, each group on a fresh key in a directory of its own each
    round: racer 0 writes a sibling of the key (a DELETE_RACE_SIBLING_SIZE body) while the others delete
    the key (racer 1 writes it first), a little later. Where deletes lock the key's directory, as that
    write does, they arrive while it holds the lock, so all of them are released together into the one
    object they found. In every other round the group's last racer renames the key away instead."""
    plan = []
    for r in range(rounds):
        row: list[Move | None] = []
        for g in range(groups):
            key = f"delete-race/r{r}/g{g}/k"
            row += [
                Move("write", f"delete-race/r{r}/g{g}/sibling", make_body(key, DELETE_RACE_SIBLING_SIZE)),
                Move("delete", key, setup=_body(key), delay_s=DELETE_RACE_DELAY_S),
                *(Move("delete", key, delay_s=DELETE_RACE_DELAY_S) for _ in range(DELETE_RACE_GROUP - 3)),
                Move("rename", key, target=f"{key}-moved", delay_s=DELETE_RACE_DELAY_S)
                if (r + g) % 2
                else Move("delete", key, delay_s=DELETE_RACE_DELAY_S),
            ]
        plan.append(tuple(row))
    return tuple(plan)


def rename_cas_plan(groups: int, rounds: int) -> Plan:
    """Groups of three racers: one renames a source over a destination while the two others CAS the source
    and the destination with the tokens of their setup versions."""
    plan = []
    for r in range(rounds):
        row: list[Move | None] = []
        for g in range(groups):
            src, dst = f"rename-cas/g{g}/src/r{r}", f"rename-cas/g{g}/dst/r{r}"
            row += [
                Move("rename", src, target=dst),
                Move("write_if_match", dst, _body(f"{dst}-cas"), setup=_body(f"{dst}-base")),
                Move("write_if_match", src, _body(f"{src}-cas"), setup=_body(f"{src}-base")),
            ]
        plan.append(tuple(row))
    return tuple(plan)


def crossing_rename_plan(racers: int, rounds: int) -> Plan:
    """Renames between three directories, each racer writing its source first, so every rename has two
    directories to lock and racers want them in opposite orders. Odd rounds: crossing pairs, racer 2p
    moving ``d0/x`` onto ``d1/y`` while racer 2p+1 moves ``d1/y`` onto ``d0/x``. Even rounds: a cycle
    ``d0 -> d1 -> d2 -> d0`` (racers 0 to 2), the others moving ``d1`` objects onto the cycle's key in
    ``d0``."""
    plan = []
    for r in range(rounds):
        row = []
        for i in range(racers):
            if r % 2:
                x, y = f"cross/d0/r{r}-{i // 2}", f"cross/d1/r{r}-{i // 2}"
                src, dst = (x, y) if i % 2 == 0 else (y, x)
            elif i < 3:
                src, dst = f"cross/d{i}/r{r}", f"cross/d{(i + 1) % 3}/r{r}"
            else:
                src, dst = f"cross/d1/r{r}-{i}", f"cross/d0/r{r}"
            row.append(Move("rename", src, target=dst, setup=_body(src)))
        plan.append(tuple(row))
    return tuple(plan)


class ConcurrencyClauses:
    """Clauses on races around delete, rename and directory pruning, on the errors a race may raise, and
    on what a process sees of another (capability truthfulness)."""

    def test_write_or_delete_racing_a_cas_is_never_lost(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """A write or delete issued after a CAS read its token always survives that CAS.

        Pairs of racers, released together, each round on a fresh key: one CASes the key with the token of
        the version it just wrote, the other writes or deletes the key. Whatever the timing, the CAS either
        takes effect first (and the write/delete then lands on top) or finds its token superseded and
        fails; either way the last word is the write/delete, and neither call raises. A CAS, write or
        delete that skips the serialization lets the CAS overwrite it (a lost update).
        """
        run_planned(adapter, cas_race_plan(max(2, sizes.threads // 2), CAS_RACE_ROUNDS))

    def test_writes_racing_pruning_deletes_all_land(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """Writes into a prefix racing deletes that empty it (local prunes the emptied directories) all
        succeed and are all readable afterwards; no call raises (no spurious EEXIST, ENOENT, StorageError).

        Each round, pairs of racers released together: one deletes the only object under a prefix, the
        other writes into that prefix or into a sibling prefix under the same parent."""
        run_planned(adapter, prune_race_plan(max(2, sizes.threads // 2), PRUNE_RACE_ROUNDS))

    def test_racing_deletes_of_one_key_all_succeed(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """Deletes of one key released together (groups of them, each on a key of its own), beside a write
        into the key's directory, all succeed (delete is idempotent: the ones that find the object gone
        have nothing to do, and never raise NotFoundError or any other error), and the key is gone; a
        rename of the key racing them moves it or finds it absent (NotFoundError), as some serial order
        of the calls explains. A delete that looks for the object before it serializes with the others
        finds it, then fails to remove it."""
        run_planned(adapter, delete_race_plan(max(1, sizes.threads // DELETE_RACE_GROUP), DELETE_RACE_ROUNDS))

    def test_rename_racing_cas_on_both_keys_is_linearizable(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """A rename racing a CAS on its source and a CAS on its destination: some serial order of the three
        explains every answer and the final state (a rename is one step where capabilities.atomic_rename,
        else a copy then a delete), so no update is lost: a CAS that succeeds on the destination is not
        overwritten by the rename that replaced it before, nor one on the source resurrected after the
        move."""
        run_planned(adapter, rename_cas_plan(max(1, sizes.threads // 3), RENAME_CAS_ROUNDS))

    def test_readers_racing_renames_see_the_object_once(self, adapter: StorageAdapter) -> None:
        """Readers and listings racing renames never see an object vanish, nor (where
        capabilities.atomic_rename) appear twice, nor torn: while one racer renames an object along a
        chain of keys in different directories, watchers sweep the chain by reads and by listings
        (race_tasks.renames_watched). A sweep up the chain always finds the object somewhere; where
        renames are atomic, a sweep down it finds it under one key at most (a copy then a delete may
        show it under two for a moment); every sighting is the object's whole body."""
        atomic = adapter.capabilities.atomic_rename
        task = partial(race_tasks.renames_watched, adapter, RENAME_WATCH_ROUNDS)
        watches = race_in_threads(RENAME_WATCHERS + 1, task)[1:]
        seen = {
            "under two keys at once (an atomic rename shows one)": [s for w in watches for s in w.doubles],
            "under no key": [s for w in watches for s in w.misses],
            "with bytes that are not its own": [s for w in watches for s in w.torn],
        }
        if not atomic:
            del seen["under two keys at once (an atomic rename shows one)"]
        sweeps = sum(w.sweeps for w in watches)
        found = {what: sightings for what, sightings in seen.items() if sightings}
        if found:
            raise Violation(
                f"a watcher saw a renamed object {' and '.join(found)}",
                "\n".join(
                    [
                        f"{sweeps} sweeps by {RENAME_WATCHERS} watchers of {RENAME_WATCH_ROUNDS} chains of "
                        f"{race_tasks.RENAME_CHAIN} keys (capabilities.atomic_rename is {atomic})",
                        *(f"{what}: {len(sightings)} sweeps" for what, sightings in found.items()),
                        *(f"  {s}" for sightings in found.values() for s in sightings[:_SHOWN]),
                    ]
                ),
            )
        if any(w.cut_off for w in watches):
            raise Inconclusive(
                f"a rename chain did not reach its last key within {race_tasks.CHAIN_WATCH_S:g} s; no "
                "violation seen",
                f"{sweeps} sweeps",
            )

    def test_crossing_renames_finish_and_keep_every_object(self, adapter: StorageAdapter) -> None:
        """Renames crossing between directories (a->b with b->a, and cycles a->b, b->c, c->a), released
        together, all finish within a deadline (no deadlock, whatever order an implementation locks in),
        and each round ends in a state some serial order of its renames gives: no object lost or
        duplicated (judged as atomic renames where capabilities.atomic_rename, else as copies then deletes,
        with fewer rounds: only renames that hold two locks at once can deadlock).

        Run in spawned processes where the store is shared across processes, so a deadlock can be broken
        by killing them; in threads otherwise."""
        caps = adapter.capabilities
        rounds = CROSSING_RENAME_ROUNDS if caps.atomic_rename else CROSSING_RENAME_ROUNDS_NOT_ATOMIC
        plan = crossing_rename_plan(CROSSING_RACERS, rounds)
        try:
            run_planned(
                adapter, plan, processes=caps.shared_across_processes, timeout_s=CROSSING_RENAME_DEADLINE_S
            )
        except RaceTimeout as exc:
            raise Violation(
                f"crossing renames did not finish within {CROSSING_RENAME_DEADLINE_S:g} s: a deadlock",
                f"{exc}\n({CROSSING_RACERS} racers renaming between 3 directories in crossing orders; see "
                "contract_tests.concurrency_clauses.crossing_rename_plan)",
            ) from None

    def test_crossing_rename_bursts_finish(self, adapter: StorageAdapter) -> None:
        """Racers each moving their own object back and forth between two directories, half of them in
        the opposite direction (every rename wants both directory locks, in crossing orders), all finish
        within the deadline, and every object ends where its racer left it, intact. Processes where the
        store is shared across processes (a deadlock is broken by killing them), threads otherwise."""
        runner = race_in_processes if adapter.capabilities.shared_across_processes else race_in_threads
        task = partial(race_tasks.rename_burst, adapter, BURST_RENAMES)
        try:
            runner(BURST_RACERS, task, CROSSING_RENAME_DEADLINE_S)
        except RaceTimeout as exc:
            raise Violation(
                f"rename bursts did not finish within {CROSSING_RENAME_DEADLINE_S:g} s: a deadlock",
                f"{exc}\n({BURST_RACERS} racers x {BURST_RENAMES} renames between two directories in "
                "crossing directions; see contract_tests.race_tasks.rename_burst)",
            ) from None
        expected = {
            f"burst/d{index % 2}/racer-{index}": make_body(f"racer-{index}", 64)
            for index in range(BURST_RACERS)
        }
        expected.update({f"burst/d{index % 2}/keep-{index}": b"" for index in range(BURST_RACERS)})
        found = {info.key: adapter.read_bytes(info.key) for info in adapter.list("burst")}
        if found != expected:
            raise Violation(
                "rename bursts lost, duplicated or damaged objects",
                f"expected {sorted(expected)}, found {sorted(found)}",
            )

    def test_shared_across_processes_is_observed(self, adapter: StorageAdapter) -> None:
        """capabilities.shared_across_processes is checked, not believed: a spawned process and this one
        each write an object the other must read; both see them exactly when the flag is True. (The
        process clauses skip only when this observation agrees. atomic_rename is checked by the rename
        races, judged under the model it declares; equal_content_equal_token by
        test_capabilities_are_declared_and_honest; durable cannot be observed without a power cut.)"""
        declared = adapter.capabilities.shared_across_processes
        shared, seen = observed_sharing(adapter)
        if shared != declared:
            raise Violation(
                f"capabilities.shared_across_processes is {declared}, but the store is "
                f"{'shared' if shared else 'per-process'}",
                seen,
            )
