"""Primitive health: the referee's circuit breaker for a server that hangs or always fails one primitive.

A server (or a gateway in front of it) that never answers, say, a conditional PUT must not cost a clause
deadline for every clause that uses one. So under a check's total budget every adapter the plugin hands a
clause is a :class:`WatchedAdapter`: each call of a storage primitive (a method of
:class:`storage_adapter.protocol.StorageAdapter`) is timed. A primitive becomes **broken** on a target
once

* a call of it **hung**: it failed transiently (``BackendUnavailableError``) after running at least the
  stall threshold (the client's whole request budget: its request timeout, times its attempts), or it was
  still in flight when a clause's deadline passed (:meth:`PrimitiveHealth.mark_stalled`);
* or it **always fails**: its calls failed transiently :data:`FAILURES_IN_A_ROW` times in a row, outside
  any fault plan, and no call of it ever answered on this target.

From then on a call of that primitive, in this process or in a spawned race worker, gets a second to
answer (bad input is refused before any I/O) and is otherwise refused with :class:`PrimitiveBroken` and
the first evidence; the plugin fails the calling clause with it (one clause pays for the hang, the others
that depend on the primitive fail within a second, and those that do not use it go on being checked). An answer of any kind (a value, ``NotFoundError``, a refused precondition)
counts as the server answering.

The state lives in a directory, one file per event (``broken-<primitive>`` holding the evidence,
``refused-<primitive>-<id>``, ``answered-<primitive>``), so spawned workers share it: an adapter pickles
with its health and a worker's calls are watched too.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract_tests.verdicts import Violation
from storage_adapter import faults
from storage_adapter.errors import BackendUnavailableError
from storage_adapter.protocol import StorageAdapter

# The primitives watched: every method of the protocol that does I/O (``child`` derives an adapter).
PRIMITIVES = frozenset(
    name
    for name, value in vars(StorageAdapter).items()
    if callable(value) and not name.startswith("_") and name != "child"
)
FAILURES_IN_A_ROW = 3
# How long a call of a broken primitive may take before it is refused (see PrimitiveHealth._graced).
GRACE_S = 1.0


class PrimitiveBroken(Violation):
    """A call of a primitive already found broken on this target: refused at once, with the evidence."""

    def __init__(self, primitive: str, target: str, evidence: str) -> None:
        super().__init__(f"{primitive} is broken on {target}: refused without calling it", evidence)
        self.primitive = primitive


@dataclass(frozen=True)
class Call:
    """A primitive call in flight: which, since when (monotonic), in which thread."""

    primitive: str
    started: float
    thread: int


_IN_FLIGHT: dict[int, tuple[str, Call]] = {}  # call number -> (health directory, call), this process
_FAILURES: dict[tuple[str, str], int] = {}  # (health directory, primitive) -> transient failures in a row
_ANSWERED: set[tuple[str, str]] = set()  # (health directory, primitive) recorded in this process
_LOCK = threading.Lock()
_NUMBERS = itertools.count()


def _first_line(error: BaseException) -> str:
    text = next((line for line in str(error).splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {text}".strip()


@dataclass(frozen=True)
class PrimitiveHealth:
    """The health of one target's primitives, kept in ``directory`` (see the module docstring).

    ``stall_s`` is how long a call may run before a transient failure of it counts as a hang: the
    client's whole request budget (a failure after it means the server never answered)."""

    directory: str
    target: str
    stall_s: float

    def _path(self, name: str) -> Path:
        return Path(self.directory, name)

    def broken(self, primitive: str) -> str | None:
        """The evidence that ``primitive`` is broken, or None while it is not."""
        try:
            return self._path(f"broken-{primitive}").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def broken_primitives(self) -> dict[str, str]:
        """Every broken primitive and its evidence, in the order they were found."""
        found = {}
        for name in sorted(self.events(), key=self._found_at):
            if name.startswith("broken-"):
                evidence = self.broken(name.removeprefix("broken-"))
                if evidence is not None:
                    found[name.removeprefix("broken-")] = evidence
        return found

    def _found_at(self, name: str) -> int:
        try:
            return self._path(name).stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def answered(self) -> frozenset[str]:
        """The primitives that answered at least once on this target."""
        return frozenset(n.removeprefix("answered-") for n in self.events() if n.startswith("answered-"))

    def events(self) -> frozenset[str]:
        """The names of every event recorded so far (compare two snapshots to see what a clause did)."""
        try:
            return frozenset(os.listdir(self.directory))
        except FileNotFoundError:
            return frozenset()

    def mark(self, primitive: str, evidence: str) -> bool:
        """Record ``primitive`` as broken with ``evidence``; the first mark wins (returns whether this one
        did). Written aside and linked into place, so a reader never sees a partial file."""
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        draft = self._path(f".draft-{uuid.uuid4().hex}")
        draft.write_text(evidence, encoding="utf-8")
        try:
            os.link(draft, self._path(f"broken-{primitive}"))
            return True
        except FileExistsError:
            return False
        finally:
            draft.unlink()

    def _touch(self, name: str) -> None:
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            self._path(name).touch(exist_ok=False)

    def mark_stalled(self, since: float, at_least_s: float | None = None) -> dict[str, str]:
        """At a clause's deadline: mark broken every primitive with a call of this target started at or
        after ``since`` (monotonic, the clause's start) still in flight for at least ``at_least_s``
        (default ``stall_s``). Returns the primitives marked by this call, with their evidence."""
        now = time.monotonic()
        threshold = self.stall_s if at_least_s is None else at_least_s
        with _LOCK:
            stalled = [c for d, c in _IN_FLIGHT.values() if d == self.directory and c.started >= since]
        marked = {}
        for call in sorted(stalled, key=lambda c: c.started):
            waited = now - call.started
            if waited < threshold or call.primitive in marked:
                continue
            evidence = (
                f"{call.primitive} hung on {self.target}: no answer after {waited:.0f} s "
                f"(still in flight at the clause deadline)"
            )
            if self.mark(call.primitive, evidence):
                marked[call.primitive] = evidence
        return marked

    def call(self, primitive: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``function`` (the adapter's ``primitive``) watched: timed and judged (see the module
        docstring); or, once the primitive is broken, given :data:`GRACE_S` to answer (see
        :meth:`_graced`)."""
        evidence = self.broken(primitive)
        if evidence is not None:
            return self._graced(primitive, evidence, function, *args, **kwargs)
        number = next(_NUMBERS)
        started = time.monotonic()
        with _LOCK:
            _IN_FLIGHT[number] = (self.directory, Call(primitive, started, threading.get_ident()))
        try:
            result = function(*args, **kwargs)
        except BackendUnavailableError as exc:
            self._failed(primitive, exc, time.monotonic() - started)
            raise
        except Exception:
            self._answer(primitive)  # the server answered, with an error: that is an answer
            raise
        finally:
            with _LOCK:
                _IN_FLIGHT.pop(number, None)
        self._answer(primitive)
        return result

    def _graced(
        self, primitive: str, evidence: str, function: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """A call of a broken primitive. Not every call reaches the server: bad input is refused before
        any I/O, an injected fault fires before it, so the call runs (in a thread of its own, with this
        thread's context: its fault plan goes along) for at most ``GRACE_S``. What it does in that time
        is its answer, except a transient failure outside a fault plan (the server still does not
        answer); one that has not finished by then, or failed so, is refused with the evidence, and the
        refusal is recorded for the plugin to fail the calling clause."""
        outcome: list[tuple[bool, Any]] = []
        context = contextvars.copy_context()

        def run() -> None:
            try:
                outcome.append((True, context.run(function, *args, **kwargs)))
            except BaseException as exc:  # handed back to the caller below
                outcome.append((False, exc))

        worker = threading.Thread(target=run, name=f"graced {primitive}", daemon=True)
        worker.start()
        worker.join(min(GRACE_S, self.stall_s))
        if outcome:
            returned, value = outcome[0]
            if returned:
                return value
            injected = context.run(faults.active_plan) is not None
            if injected or not isinstance(value, BackendUnavailableError):
                raise value
        self._touch(f"refused-{primitive}-{uuid.uuid4().hex[:12]}")
        raise PrimitiveBroken(primitive, self.target, evidence)

    def _answer(self, primitive: str) -> None:
        key = (self.directory, primitive)
        with _LOCK:
            _FAILURES.pop(key, None)
            first = key not in _ANSWERED
            _ANSWERED.add(key)
        if first:
            self._touch(f"answered-{primitive}")

    def _failed(self, primitive: str, error: BaseException, took_s: float) -> None:
        if took_s >= self.stall_s:
            self.mark(
                primitive,
                f"{primitive} hung on {self.target}: no answer within {took_s:.0f} s, the client's whole "
                f"request budget; it ended with {_first_line(error)}",
            )
            return
        if faults.active_plan() is not None:
            return  # a fault the contract injected on purpose says nothing about the server
        key = (self.directory, primitive)
        with _LOCK:
            _FAILURES[key] = in_a_row = _FAILURES.get(key, 0) + 1
        if in_a_row >= FAILURES_IN_A_ROW and primitive not in self.answered():
            self.mark(
                primitive,
                f"{primitive} always fails on {self.target}: {in_a_row} calls in a row failed transiently "
                f"and none ever answered; the last ended with {_first_line(error)}",
            )


class WatchedAdapter:
    """An adapter whose primitive calls go through a :class:`PrimitiveHealth`; everything else
    (properties, equality, hashing, pickling) is the wrapped adapter's, and ``child`` stays watched."""

    __slots__ = ("_adapter", "_health")

    def __init__(self, adapter: StorageAdapter, health: PrimitiveHealth) -> None:
        self._adapter = adapter
        self._health = health

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._adapter, name)
        if name == "child":
            return lambda prefix: WatchedAdapter(value(prefix), self._health)
        if name in PRIMITIVES:
            return lambda *args, **kwargs: self._health.call(name, value, *args, **kwargs)
        return value

    def __eq__(self, other: object) -> bool:
        return self._adapter == (other._adapter if isinstance(other, WatchedAdapter) else other)

    def __hash__(self) -> int:
        return hash(self._adapter)

    def __repr__(self) -> str:
        return repr(self._adapter)

    def __reduce__(self) -> tuple[Any, ...]:
        return WatchedAdapter, (self._adapter, self._health)


def watched(adapter: StorageAdapter, health: PrimitiveHealth | None) -> StorageAdapter:
    """``adapter`` watched by ``health``, or as it is when there is none."""
    return adapter if health is None else WatchedAdapter(adapter, health)
