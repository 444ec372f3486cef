"""Recorded operation histories: what each worker asked the store, when, and what it answered.

:class:`HistoryRecorder` wraps any object with the adapter API and records every register operation as
an *invoke* event before the call and a *complete* event after it. Events are frozen dataclasses that
pickle, so workers in threads, OS processes and Spark tasks each record their own list, return it, and
:meth:`History.from_events` merges them into one history of :class:`Operation` s for the checker
(:mod:`contract_tests.linearizability`).

Recorded operations, by the name the checker models them under:

==================  ==========================================  ==========================================
op                  adapter methods                             recorded result
==================  ==========================================  ==========================================
``read``            read_bytes, read_text, read_if_exists       the bytes, or None when absent
``read_versioned``  read_versioned                              ``(bytes, token)``, or None when absent
``exists``          exists                                      bool
``write``           write                                       the new token
``write_if_absent`` write_if_absent                             the new token, or None (it existed)
``write_if_match``  write_if_match                              the new token, or None (no change)
``delete``          delete (and each delete of delete_prefix)   None
==================  ==========================================  ==========================================

Outcomes are classified strictly: an error is accepted only where the protocol declares it.

* ``OK``: the operation returned, or a read raised NotFoundError (the answer "absent").
* ``FAILED``: a refusal of the call itself, raised before any I/O (invalid key, bad configuration,
  unsupported operation, a wrong argument type): it had no effect.
* ``UNKNOWN``: :class:`BackendUnavailableError`, the protocol's transient failure ("the outcome of a
  mutation that raised this is unknown"), or an invoke with no complete event (the worker died, or was
  interrupted). The checker lets the mutation take effect anywhere after its invoke, or not at all.
* ``UNDECLARED``: any other error: a plain StorageError, PermissionDeniedError, NotFoundError from a
  mutation (none of them raises it), an untranslated exception. No operation of the register model has it
  as an outcome, so the checker reports it as a violation, naming the error, whatever the rest of the
  history says: a write that fails spuriously under contention is a broken promise, not an unknown.

Clocks: times are ``time.monotonic_ns()``, which is one clock for every process on a host. Events also
carry the host name and ``time.time_ns()``; a history whose events come from several hosts is ordered by
wall clock instead, with each operation's interval widened by the allowed clock skew, which can only
make the check more permissive, never report a false violation (if the skew bound holds).
"""

from __future__ import annotations

import enum
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from contract_tests.bodies import describe
from storage_adapter.derived import DerivedOperations
from storage_adapter.errors import (
    BackendUnavailableError,
    ConfigurationError,
    InvalidKeyError,
    NotFoundError,
    UnsupportedOperationError,
)
from storage_adapter.keys import join_key

# Refusals of the call itself, raised before any I/O: the operation certainly had no effect.
_REFUSALS = (InvalidKeyError, ConfigurationError, UnsupportedOperationError, TypeError)
DEFAULT_CROSS_HOST_SKEW_NS = 50_000_000


class EventKind(enum.Enum):
    INVOKE = "invoke"
    COMPLETE = "complete"


class Outcome(enum.Enum):
    OK = "ok"  # returned a result
    FAILED = "failed"  # the call was refused before any I/O: no effect
    UNKNOWN = "unknown"  # backend unavailable (transient), worker died: may or may not have taken effect
    UNDECLARED = "undeclared"  # raised an error that is not an outcome of the operation: a violation


@dataclass(frozen=True)
class Event:
    """One invoke or complete event. ``op``, ``key`` and ``args`` are set on both kinds;
    ``result``, ``outcome`` and ``error`` only on complete events."""

    kind: EventKind
    op_id: str
    worker: str
    host: str
    monotonic_ns: int
    wall_ns: int
    op: str
    key: str
    args: tuple[Any, ...] = ()
    result: Any = None
    outcome: Outcome | None = None
    error: str | None = None


@dataclass(frozen=True)
class Operation:
    """An invoke paired with its completion. ``complete_ns`` is None when the outcome is unknown: the
    operation is then treated as still running forever (it may take effect at any point after
    ``invoke_ns``, or never)."""

    op_id: str
    worker: str
    op: str
    key: str
    args: tuple[Any, ...]
    invoke_ns: int
    complete_ns: int | None
    outcome: Outcome
    result: Any = None
    error: str | None = None

    @property
    def ambiguous(self) -> bool:
        return self.outcome is Outcome.UNKNOWN

    def describe(self, origin_ns: int = 0) -> str:
        """One line: worker, call, answer and the real-time interval in ms from ``origin_ns``."""
        args = ", ".join(map(describe, (self.key, *self.args)))
        if self.outcome is Outcome.OK:
            answer = describe(self.result)
        elif self.outcome is Outcome.FAILED:
            answer = f"failed ({self.error})"
        elif self.outcome is Outcome.UNDECLARED:
            answer = f"raised {self.error} (not a declared outcome)"
        else:
            answer = f"UNKNOWN outcome ({self.error or 'no completion'})"
        start = (self.invoke_ns - origin_ns) / 1e6
        end = "inf" if self.complete_ns is None else f"{(self.complete_ns - origin_ns) / 1e6:.3f}"
        return f"[{self.worker}] {self.op}({args}) -> {answer}   @ {start:.3f}..{end} ms"


@dataclass(frozen=True)
class History:
    """A merged history: operations sorted by invoke time."""

    operations: tuple[Operation, ...]

    @classmethod
    def from_events(
        cls, events: Iterable[Event], cross_host_skew_ns: int = DEFAULT_CROSS_HOST_SKEW_NS
    ) -> History:
        """Pair invoke and complete events (from any number of workers) into operations.

        Raises ValueError for a complete event without its invoke or an op id used twice.
        """
        events = list(events)
        multi_host = len({e.host for e in events}) > 1
        invokes: dict[str, Event] = {}
        completes: dict[str, Event] = {}
        for event in events:
            table = invokes if event.kind is EventKind.INVOKE else completes
            if event.op_id in table:
                raise ValueError(f"history has two {event.kind.value} events for op {event.op_id}")
            table[event.op_id] = event
        orphans = set(completes) - set(invokes)
        if orphans:
            raise ValueError(f"history has complete events without an invoke: {sorted(orphans)[:5]}")

        def at(event: Event) -> int:
            return event.wall_ns if multi_host else event.monotonic_ns

        skew = cross_host_skew_ns if multi_host else 0
        operations = []
        for op_id, call in invokes.items():
            done = completes.get(op_id)
            outcome = Outcome.UNKNOWN if done is None or done.outcome is None else done.outcome
            operations.append(
                Operation(
                    op_id=op_id,
                    worker=call.worker,
                    op=call.op,
                    key=call.key,
                    args=call.args,
                    invoke_ns=at(call) - skew,
                    complete_ns=None if outcome is Outcome.UNKNOWN or done is None else at(done) + skew,
                    outcome=outcome,
                    result=None if done is None else done.result,
                    error=None if done is None else done.error,
                )
            )
        operations.sort(key=lambda o: (o.invoke_ns, o.op_id))
        return cls(tuple(operations))

    @classmethod
    def merge(cls, *event_lists: Iterable[Event]) -> History:
        """One history from the event lists of several workers."""
        return cls.from_events(e for events in event_lists for e in events)

    def __len__(self) -> int:
        return len(self.operations)

    def __iter__(self) -> Iterator[Operation]:
        return iter(self.operations)

    def keys(self) -> list[str]:
        return sorted({o.key for o in self.operations})


def classify_error(exc: BaseException) -> Outcome:
    """The outcome of an operation that raised ``exc`` (other than a read's NotFoundError, which is the
    answer "absent"): FAILED for a refusal of the call, UNKNOWN for a transient failure or an interrupt
    (not an answer of the backend), UNDECLARED for anything else (see the module docstring)."""
    if isinstance(exc, _REFUSALS):
        return Outcome.FAILED
    if isinstance(exc, BackendUnavailableError) or not isinstance(exc, Exception):
        return Outcome.UNKNOWN
    return Outcome.UNDECLARED


def _as_body(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


class _Sink:
    """The event list shared by a recorder and its children. Thread-safe."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lock = threading.Lock()

    def add(self, event: Event) -> None:
        with self.lock:
            self.events.append(event)


class HistoryRecorder(DerivedOperations):
    """Wraps an adapter (or anything with its API) and records every register operation.

    ``worker`` names the caller in the history; when None, each call is attributed to
    ``host/pid/thread-name``, so one recorder can be shared by many threads. Calls behave exactly as the
    inner adapter's (results returned, errors re-raised) except ``rename``, which the register model does
    not cover: it raises UnsupportedOperationError rather than leave a hole in the history.
    ``delete_prefix`` lists and deletes through the recorder, so each delete is recorded. Other methods
    pass through unrecorded. ``child(prefix)`` records into the same event list with keys relative to this
    recorder's root. A recorder pickles as a fresh recorder (same inner adapter and worker name, no events).
    """

    def __init__(self, inner: Any, worker: str | None = None) -> None:
        self.inner = inner
        self.worker = worker
        self._root_prefix = ""
        self._sink = _Sink()
        self._host = socket.gethostname()

    @property
    def events(self) -> list[Event]:
        """A copy of the events recorded so far (by this recorder and its children)."""
        with self._sink.lock:
            return list(self._sink.events)

    def history(self) -> History:
        return History.from_events(self.events)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (HistoryRecorder, (self.inner, self.worker))

    def __repr__(self) -> str:
        return f"HistoryRecorder({self.inner!r}, worker={self.worker!r})"

    def child(self, prefix: str) -> HistoryRecorder:
        child = HistoryRecorder(self.inner.child(prefix), self.worker)
        child._sink = self._sink
        child._root_prefix = join_key(self._root_prefix, prefix.strip("/"))
        return child

    # -- recording ------------------------------------------------------------------------------------
    def _record(self, op: str, key: str, args: tuple[Any, ...], call: Any, absent_on_not_found: bool) -> Any:
        worker = self.worker or f"{self._host}/{os.getpid()}/{threading.current_thread().name}"
        op_id = uuid.uuid4().hex
        recorded_key = join_key(self._root_prefix, key) if isinstance(key, str) else repr(key)
        common: dict[str, Any] = {
            "op_id": op_id,
            "worker": worker,
            "host": self._host,
            "op": op,
            "key": recorded_key,
        }
        invoked = Event(
            EventKind.INVOKE, monotonic_ns=time.monotonic_ns(), wall_ns=time.time_ns(), args=args, **common
        )
        self._sink.add(invoked)
        result: Any = None
        outcome = Outcome.OK
        error: BaseException | None = None
        try:
            result = call()
        except NotFoundError as exc:
            if not absent_on_not_found:
                outcome, error = classify_error(exc), exc
            else:
                error = exc  # an absent object is an answer, not a failure
        except BaseException as exc:
            outcome, error = classify_error(exc), exc
        self._sink.add(
            Event(
                EventKind.COMPLETE,
                monotonic_ns=time.monotonic_ns(),
                wall_ns=time.time_ns(),
                args=args,
                result=result if outcome is Outcome.OK else None,
                outcome=outcome,
                error=None if error is None else f"{type(error).__name__}: {error}",
                **common,
            )
        )
        if error is not None:
            raise error
        return result

    # -- recorded reads -------------------------------------------------------------------------------
    def read_bytes(self, key: str) -> bytes:
        return self._record("read", key, (), lambda: self.inner.read_bytes(key), True)  # type: ignore[no-any-return]

    def read_if_exists(self, key: str) -> bytes | None:
        # Not the derived one: an absent key is recorded as a read that returned None, not as an error.
        return self._record("read", key, (), lambda: self.inner.read_if_exists(key), True)  # type: ignore[no-any-return]

    def read_versioned(self, key: str) -> Any:
        box: list[Any] = []

        def call() -> tuple[bytes, str]:
            box.append(self.inner.read_versioned(key))
            return (box[0].data, box[0].token)

        self._record("read_versioned", key, (), call, True)
        return box[0]

    def exists(self, key: str) -> bool:
        return self._record("exists", key, (), lambda: self.inner.exists(key), True)  # type: ignore[no-any-return]

    # -- recorded mutations ---------------------------------------------------------------------------
    def write(self, key: str, data: bytes | str) -> str:
        return self._record("write", key, (_as_body(data),), lambda: self.inner.write(key, data), False)  # type: ignore[no-any-return]

    def write_if_absent(self, key: str, data: bytes | str) -> str | None:
        call = lambda: self.inner.write_if_absent(key, data)  # noqa: E731
        return self._record("write_if_absent", key, (_as_body(data),), call, False)  # type: ignore[no-any-return]

    def write_if_match(self, key: str, data: bytes | str, token: str) -> str | None:
        call = lambda: self.inner.write_if_match(key, data, token)  # noqa: E731
        return self._record("write_if_match", key, (_as_body(data), token), call, False)  # type: ignore[no-any-return]

    def delete(self, key: str) -> None:
        self._record("delete", key, (), lambda: self.inner.delete(key), False)

    def rename(self, src: str, dst: str) -> None:
        raise UnsupportedOperationError(
            f"HistoryRecorder does not model rename ({src!r} -> {dst!r}): it would leave the history "
            "without the delete and the write it performs",
            key=src,
        )
