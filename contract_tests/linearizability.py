"""A linearizability checker for recorded histories of the adapter's per-key register operations.

Algorithm: Wing & Gong's search with Lowe's memoization (the WGL algorithm, as in Porcupine). Each key is
an independent register, so the history is partitioned by key and every key is checked on its own. Call
and return events are sorted by time (a call sorts before a return at the same instant, so touching
intervals count as concurrent); the search repeatedly linearizes a pending call that no unlinearized
completed operation precedes in real time, applies it to the model, and backtracks when a return is
reached whose operation is not yet linearized. A (linearized-set bitset, model state) pair already
explored is never explored again.

The register model (state: absent, or ``(bytes, token)`` with the token possibly not yet observed):

* ``read`` returns the bytes (None when absent); ``exists`` whether present;
* ``read_versioned`` returns the bytes and the token; it binds a not-yet-observed token;
* ``write`` replaces the object; its result is the new token;
* ``write_if_absent`` creates the object only if absent; its result is the new token, or None when the
  object existed;
* ``write_if_match(body, token)`` replaces the object only if its current token equals ``token``,
  returning the new token, else returns None and changes nothing;
* ``delete`` makes the key absent.

Token equality: tokens are compared as strings when the state's token is known. When it is not (the
version came from an ambiguous write) a token is
taken to match when it was observed, anywhere in the key's history, naming the same bytes. That is exact
on S3 (the ETag of a single-part put is the MD5 of the bytes) and exact on memory and local when every
written body is unique, which is why the workloads write unique bodies. A token observed naming two
different bodies is itself a violation on every backend.

Ambiguous operations (outcome UNKNOWN) never return: they may be linearized anywhere after their invoke,
or dropped; the search succeeds once every completed operation is linearized. Failed operations
(outcome FAILED) had no effect and are ignored, as are ambiguous reads. An operation that raised an error
which is none of its outcomes (outcome UNDECLARED, see :mod:`contract_tests.history`) makes its key a
violation without a search: no order of operations explains an answer the model does not have.

The search is exponential in the worst case; a time and a step budget make it answer UNKNOWN instead of
hanging. On a violation, the checker shrinks the key's history to a small counterexample (see
:func:`_shrink_counterexample`) and reports its operations.
"""

from __future__ import annotations

import enum
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contract_tests.history import History, Operation, Outcome

State = tuple[bytes, str | None] | None  # None: absent
TokenBodies = dict[str, frozenset[bytes]]
_ILLEGAL = object()
_EFFECT_FREE_WHEN_OK = frozenset({"read", "read_versioned", "exists"})


class KeyVerdict(enum.Enum):
    LINEARIZABLE = "linearizable"
    VIOLATION = "violation"
    UNKNOWN = "unknown"  # the budget ran out before the search decided


@dataclass(frozen=True)
class KeyResult:
    """The verdict for one key. ``counterexample`` (on a violation) lists the operations involved,
    sorted by invoke time; ``reason`` says why in one line."""

    key: str
    verdict: KeyVerdict
    operations: int
    counterexample: tuple[Operation, ...] = ()
    reason: str = ""
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class CheckResult:
    """The verdict for a whole history: a VIOLATION if any key has one, else UNKNOWN if any key ran out
    of budget, else LINEARIZABLE."""

    verdict: KeyVerdict
    operations: int
    keys: tuple[KeyResult, ...] = field(default=())
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verdict is KeyVerdict.LINEARIZABLE

    @property
    def violations(self) -> tuple[KeyResult, ...]:
        return tuple(k for k in self.keys if k.verdict is KeyVerdict.VIOLATION)

    def report(self) -> str:
        """Human-readable summary; on a violation, each offending key's counterexample."""
        lines = [
            f"{self.verdict.value}: {self.operations} operations on {len(self.keys)} keys "
            f"checked in {self.elapsed_s:.3f} s"
        ]
        for key in self.keys:
            if key.verdict is KeyVerdict.LINEARIZABLE:
                continue
            lines.append(f"key {key.key!r}: {key.verdict.value} ({key.operations} ops): {key.reason}")
            origin = min((o.invoke_ns for o in key.counterexample), default=0)
            lines.extend("    " + o.describe(origin) for o in key.counterexample)
        return "\n".join(lines)


class _Budget:
    """Shared by every search of one check: a deadline and an optional number of search steps."""

    def __init__(self, deadline: float, max_steps: int | None) -> None:
        self.deadline = deadline
        self.max_steps = max_steps
        self.steps = 0

    def spend(self) -> bool:
        """Count one step; False once the budget is exhausted (the clock is read every 256 steps)."""
        self.steps += 1
        if self.max_steps is not None and self.steps > self.max_steps:
            return False
        return self.steps % 256 != 0 or time.monotonic() < self.deadline


class _OutOfBudget(Exception):
    pass


def token_bodies(operations: Iterable[Operation]) -> TokenBodies:
    """Every token observed in completed operations, with the bodies it was observed naming."""
    seen: dict[str, set[bytes]] = defaultdict(set)
    for op in operations:
        if op.outcome is not Outcome.OK or op.result is None:
            continue
        if op.op in ("write", "write_if_absent", "write_if_match"):
            seen[op.result].add(op.args[0])
        elif op.op == "read_versioned":
            seen[op.result[1]].add(op.result[0])
    return {token: frozenset(bodies) for token, bodies in seen.items()}


def _token_matches(state: State, token: str, tokens: TokenBodies) -> bool | None:
    """Whether ``token`` is the state's token: True, False, or None when it cannot be told."""
    if state is None:
        return False
    if state[1] is not None:
        return state[1] == token
    bodies = tokens.get(token)
    if bodies is None:
        return None
    return None if state[0] in bodies else False


def step(state: State, op: Operation, tokens: TokenBodies) -> Any:
    """The register model: the state after ``op`` (at its linearization point), or ``_ILLEGAL`` when
    ``op``'s recorded result is impossible in ``state``. Ambiguous ops are applied as having taken
    effect (not taking effect is the search's choice of never linearizing them)."""
    name, result, ambiguous = op.op, op.result, op.ambiguous
    if name == "read":
        return state if (None if state is None else state[0]) == result else _ILLEGAL
    if name == "exists":
        return state if (state is not None) == result else _ILLEGAL
    if name == "read_versioned":
        if result is None or state is None:
            return state if result is None and state is None else _ILLEGAL
        body, token = result
        if state[0] != body:
            return _ILLEGAL
        if state[1] is None:
            return (body, token)
        return state if state[1] == token else _ILLEGAL
    if name == "delete":
        return None
    body = op.args[0]
    if name == "write":
        return (body, None if ambiguous else result)
    if name == "write_if_absent":
        if ambiguous or result is not None:
            return (body, None if ambiguous else result) if state is None else _ILLEGAL
        return state if state is not None else _ILLEGAL
    if name == "write_if_match":
        match = _token_matches(state, op.args[1], tokens)
        if ambiguous or result is not None:
            return (body, None if ambiguous else result) if match is not False else _ILLEGAL
        return state if match is not True else _ILLEGAL
    raise ValueError(f"the register model has no operation {name!r} (op {op.op_id})")


class _Entry:
    __slots__ = ("index", "is_call", "match", "next", "prev")

    def __init__(self, index: int, is_call: bool) -> None:
        self.index = index
        self.is_call = is_call
        self.match: _Entry | None = None
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


def _entry_list(ops: Sequence[Operation]) -> _Entry:
    """A doubly linked list of call/return entries in time order, behind a sentinel head."""
    timed: list[tuple[float, int, _Entry]] = []
    for i, op in enumerate(ops):
        call, ret = _Entry(i, True), _Entry(i, False)
        call.match = ret
        timed.append((op.invoke_ns, 0, call))
        timed.append((float("inf") if op.complete_ns is None else op.complete_ns, 1, ret))
    timed.sort(key=lambda t: (t[0], t[1], t[2].index))
    head = _Entry(-1, False)
    prev = head
    for _, _, entry in timed:
        prev.next, entry.prev = entry, prev
        prev = entry
    return head


def _lift(entry: _Entry) -> None:
    for e in (entry, entry.match):
        assert e is not None and e.prev is not None  # every listed entry has a match and a predecessor
        e.prev.next = e.next
        if e.next is not None:
            e.next.prev = e.prev


def _unlift(entry: _Entry) -> None:
    for e in (entry.match, entry):
        assert e is not None and e.prev is not None
        e.prev.next = e
        if e.next is not None:
            e.next.prev = e


def _relevant(ops: Iterable[Operation]) -> list[Operation]:
    """Drop what cannot constrain the search: failed ops (no effect) and ambiguous reads."""
    return [
        o
        for o in ops
        if o.outcome is not Outcome.FAILED and not (o.ambiguous and o.op in _EFFECT_FREE_WHEN_OK)
    ]


def _linearizable(ops: Sequence[Operation], tokens: TokenBodies, budget: _Budget) -> bool:
    """The WGL search. Raises _OutOfBudget when the budget runs out."""
    required = sum(1 for o in ops if not o.ambiguous)
    if required == 0:
        return True
    head = _entry_list(ops)
    state: State = None
    linearized = 0
    done = 0
    seen: set[tuple[int, State]] = set()
    stack: list[tuple[_Entry, State]] = []
    entry = head.next
    while True:
        if not budget.spend():
            raise _OutOfBudget
        if entry is not None and entry.is_call:
            op = ops[entry.index]
            after = step(state, op, tokens)
            if after is not _ILLEGAL:
                memo = (linearized | (1 << entry.index), after)
                if memo not in seen:
                    seen.add(memo)
                    stack.append((entry, state))
                    state, linearized = after, memo[0]
                    done += not op.ambiguous
                    if done == required:
                        return True
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
            continue
        # A return whose operation is not linearized yet: undo the latest choice and try the next one.
        if not stack:
            return False
        entry, state = stack.pop()
        linearized &= ~(1 << entry.index)
        done -= not ops[entry.index].ambiguous
        _unlift(entry)
        entry = entry.next


def _token_conflict(
    ops: Sequence[Operation], tokens: TokenBodies
) -> tuple[str, tuple[Operation, ...]] | None:
    """A token observed naming two different bodies (a violation on every backend), with its ops."""
    for token, bodies in tokens.items():
        if len(bodies) > 1:
            involved = tuple(
                o
                for o in ops
                if o.outcome is Outcome.OK
                and (
                    (o.op in ("write", "write_if_absent", "write_if_match") and o.result == token)
                    or (o.op == "read_versioned" and o.result is not None and o.result[1] == token)
                )
            )
            return f"token {token!r} was observed naming {len(bodies)} different bodies", involved
    return None


def _as_prefix(ops: Sequence[Operation], cut_ns: int) -> list[Operation]:
    """The history as it stood at ``cut_ns``: operations completed by then keep their result; those still
    running become ambiguous (reads among them are dropped by ``_relevant``)."""
    prefix = []
    for op in ops:
        if op.invoke_ns > cut_ns:
            continue
        if op.complete_ns is not None and op.complete_ns > cut_ns:
            op = replace(op, complete_ns=None, outcome=Outcome.UNKNOWN, result=None)
        prefix.append(op)
    return _relevant(prefix)


def _observes_absence(op: Operation) -> bool:
    return op.outcome is Outcome.OK and (
        (op.op in ("read", "read_versioned") and op.result is None)
        or (op.op == "exists" and op.result is False)
        or (op.op == "write_if_absent" and op.result is not None)
        or (op.op == "write_if_match" and op.result is None)
    )


def _observes_presence(op: Operation) -> bool:
    return op.outcome is Outcome.OK and (
        (op.op == "exists" and op.result is True)
        or (op.op == "write_if_absent" and op.result is None)
        or (op.op == "write_if_match" and op.result is None)
    )


def _effect_free(op: Operation) -> bool:
    return op.outcome is Outcome.OK and (
        op.op in _EFFECT_FREE_WHEN_OK
        or (op.op == "write_if_absent" and op.result is None)
        or (op.op == "write_if_match" and op.result is None)
    )


def _removable_mutation(op: Operation, rest: Sequence[Operation], tokens: TokenBodies) -> bool:
    """A mutation may leave the counterexample only if no remaining operation depends on its effect:
    nobody observes its bytes or its token, and (for a delete) nobody observes an absence, (for a write)
    nobody observes a bare presence. This keeps the shrunk history honest: its violation is not an
    artefact of removing the write a read depended on."""
    if op.op == "delete":
        return not any(_observes_absence(o) for o in rest)
    if any(_observes_presence(o) for o in rest):
        return False
    body = op.args[0]
    produced = op.result if op.outcome is Outcome.OK and isinstance(op.result, str) else None
    for other in rest:
        if other.op in ("read", "read_versioned") and other.result is not None:
            seen_body = other.result if other.op == "read" else other.result[0]
            if seen_body == body or (other.op == "read_versioned" and other.result[1] == produced):
                return False
        if other.op == "write_if_match" and (
            other.args[1] == produced or body in tokens.get(other.args[1], frozenset())
        ):
            return False
    return True


def _shrink_counterexample(
    ops: Sequence[Operation], tokens: TokenBodies, budget: _Budget
) -> tuple[Operation, ...]:
    """A small non-linearizable sub-history of the key's (non-linearizable) history.

    1. The shortest prefix (cut at a completion; operations still running at the cut become ambiguous)
       that is already non-linearizable: any prefix of a linearizable history is linearizable, so this
       is a genuine violation. Found by bisection.
    2. Effect-free operations (reads, failed conditional writes) are dropped one by one while the rest
       stays non-linearizable: a linearization of the whole, minus effect-free operations, linearizes the
       rest, so the rest is still a genuine violation.
    3. Mutations are dropped the same way, but only when no remaining operation depends on their effect
       (see ``_removable_mutation``).
    Stops shrinking (returning what it has) when the budget runs out.
    """
    cuts = sorted({o.complete_ns for o in ops if o.complete_ns is not None})
    current = list(ops)
    try:
        low, high = 0, len(cuts) - 1  # cut at the last completion, the history is non-linearizable
        while low < high:
            middle = (low + high) // 2
            if _linearizable(_as_prefix(ops, cuts[middle]), tokens, budget):
                low = middle + 1
            else:
                high = middle
        if cuts:
            current = _as_prefix(ops, cuts[high])
        for phase in ("effect-free", "mutation"):
            for op in sorted(current, key=lambda o: -o.invoke_ns):
                rest = [o for o in current if o is not op]
                if phase == "effect-free" and not _effect_free(op):
                    continue
                if phase == "mutation" and (_effect_free(op) or not _removable_mutation(op, rest, tokens)):
                    continue
                if not _linearizable(rest, tokens, budget):
                    current = rest
    except _OutOfBudget:
        pass  # keep the smallest violating history found so far
    return tuple(sorted(current, key=lambda o: (o.invoke_ns, o.op_id)))


def _check_key(key: str, operations: Sequence[Operation], budget: _Budget, shrink: bool = True) -> KeyResult:
    """Check one key's operations (all must be on ``key``)."""
    started = time.monotonic()
    ops = sorted(_relevant(operations), key=lambda o: (o.invoke_ns, o.op_id))
    tokens = token_bodies(ops)

    def result(verdict: KeyVerdict, reason: str = "", example: tuple[Operation, ...] = ()) -> KeyResult:
        return KeyResult(key, verdict, len(operations), example, reason, time.monotonic() - started)

    undeclared = tuple(o for o in ops if o.outcome is Outcome.UNDECLARED)
    if undeclared:
        errors = sorted({(o.error or "?").split(":", 1)[0] for o in undeclared})
        reason = (
            f"{len(undeclared)} operation(s) raised an error that is not a declared outcome "
            f"({', '.join(errors)}): a call that fails under contention breaks the promise"
        )
        return result(KeyVerdict.VIOLATION, reason, undeclared[:20])
    conflict = _token_conflict(ops, tokens)
    if conflict is not None:
        return result(KeyVerdict.VIOLATION, conflict[0], conflict[1])
    try:
        if _linearizable(ops, tokens, budget):
            return result(KeyVerdict.LINEARIZABLE)
    except _OutOfBudget:
        return result(KeyVerdict.UNKNOWN, "the search ran out of its time/step budget")
    example = _shrink_counterexample(ops, tokens, budget) if shrink else tuple(ops)
    reason = "no order of these operations consistent with real time explains their results"
    return result(KeyVerdict.VIOLATION, reason, example)


def check_history(
    history: History | Iterable[Operation],
    *,
    time_budget_s: float = 60.0,
    max_steps: int | None = None,
    shrink: bool = True,
) -> CheckResult:
    """Check a history for linearizability against the register model, key by key.

    ``time_budget_s`` and ``max_steps`` bound the whole check (search plus counterexample shrinking);
    a key whose search does not finish within them is UNKNOWN. Never raises for a violation: inspect
    ``result.verdict`` / ``result.ok`` and print ``result.report()``.
    """
    started = time.monotonic()
    operations = list(history)
    budget = _Budget(started + time_budget_s, max_steps)
    per_key: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        per_key[op.key].append(op)
    results = tuple(_check_key(key, per_key[key], budget, shrink) for key in sorted(per_key))
    verdicts = {r.verdict for r in results}
    verdict = (
        KeyVerdict.VIOLATION
        if KeyVerdict.VIOLATION in verdicts
        else KeyVerdict.UNKNOWN
        if KeyVerdict.UNKNOWN in verdicts
        else KeyVerdict.LINEARIZABLE
    )
    return CheckResult(verdict, len(operations), results, time.monotonic() - started)
