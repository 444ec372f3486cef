"""Fault injection: make the I/O below an adapter fail, at a chosen step, in the calling thread only.

Every driver marks each I/O step it takes (an obstore request, a system call of the local backend) with a
*fault point* just before the call. Outside :func:`injected` a fault point costs one thread-local lookup.
Inside it, the active :class:`FaultPlan` counts the points this thread passes and fails the chosen ones
with an error the driver builds exactly as its library would raise it (an obstore exception carrying an
HTTP status, an ``OSError`` with an errno), so the fault travels the same path as a real one: through
the driver's own exception handling and the one translation into :mod:`storage_adapter.errors`.

This is how the contract checks that failures are reported, not mistaken for outcomes (a CAS that calls
an outage a lost race, a delete that swallows errors) and that a failed operation leaves no partial state
(contract_tests.failure_clauses). Adapters whose drivers mark no fault point never fire a plan, which
the contract reports as "fault injection not supported" rather than as a pass.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class FaultKind(enum.Enum):
    """What an injected fault looks like to the driver, and the error the adapter must raise for it."""

    UNAVAILABLE = "unavailable"  # HTTP 503 / ETIMEDOUT: BackendUnavailableError (transient)
    DENIED = "denied"  # HTTP 403 / EACCES: PermissionDeniedError
    BROKEN = "broken"  # HTTP 400 / EIO: a plain, permanent StorageError
    PANIC = "panic"  # the native library crashed (a Rust panic in obstore): a plain StorageError


class InjectedPanic(BaseException):
    """What pyo3 raises for a Rust panic, ``pyo3_runtime.PanicException``: a BaseException that no module
    exports, recognised by its qualified name (storage_adapter.translation)."""


InjectedPanic.__module__, InjectedPanic.__name__, InjectedPanic.__qualname__ = (
    "pyo3_runtime",
    "PanicException",
    "PanicException",
)


@dataclass
class FaultPlan:
    """Fail ``times`` consecutive fault points of the calling thread, after letting ``skip`` pass.

    ``fired`` lists the names of the points that failed, ``passed`` those that did not: after an
    operation, an empty ``fired`` means the operation took fewer than ``skip + 1`` steps. ``recovered``
    lists the failed points a driver deliberately worked around by another route (see :func:`recovering`).
    """

    kind: FaultKind
    skip: int = 0
    times: int = 1
    passed: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    # Steps may come from the worker threads a driver fans out to (see carried): counted one at a time.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, FaultKind):
            raise TypeError(f"kind must be a FaultKind, not {type(self.kind).__name__}")
        if self.skip < 0 or self.times < 1:
            raise ValueError(f"skip must be >= 0 and times >= 1 (got skip={self.skip}, times={self.times})")

    def step(self, point: str) -> FaultKind | None:
        with self._lock:
            seen = len(self.passed) + len(self.fired)
            if self.skip <= seen < self.skip + self.times:
                self.fired.append(point)
                return self.kind
            self.passed.append(point)
            return None


# A context variable rather than a thread-local: a new thread starts without a plan (so the plan stays in
# the thread that set it), while an asyncio task and ``asyncio.to_thread`` inherit their caller's context,
# so the faults of an async adapter's call follow it onto the event loop and into its worker threads.
_ACTIVE: contextvars.ContextVar[FaultPlan | None] = contextvars.ContextVar("fault_plan", default=None)


@contextmanager
def injected(plan: FaultPlan) -> Iterator[FaultPlan]:
    """Run the block with ``plan`` active in this thread (and no other; the asyncio tasks it starts and
    the threads they hand work to inherit it). Not reentrant."""
    if _ACTIVE.get() is not None:
        raise RuntimeError("a fault plan is already active in this thread")
    token = _ACTIVE.set(plan)
    try:
        yield plan
    finally:
        _ACTIVE.reset(token)


def active_plan() -> FaultPlan | None:
    """The plan active in this thread, if any (a caller judging failures can tell injected ones apart)."""
    return _ACTIVE.get()


def carried(call: Callable[P, R]) -> Callable[P, R]:
    """``call``, run under the plan active in this thread (if any) wherever it is called: a driver that
    fans one operation out to worker threads wraps each piece, so the operation's faults follow it."""
    plan = _ACTIVE.get()
    if plan is None:
        return call

    @functools.wraps(call)
    def under_plan(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _ACTIVE.set(plan)
        try:
            return call(*args, **kwargs)
        finally:
            _ACTIVE.reset(token)

    return under_plan


def due(point: str) -> FaultKind | None:
    """Called by a driver just before the I/O step ``point``: the kind of fault to raise there, if any."""
    plan = _ACTIVE.get()
    kind = None if plan is None else plan.step(point)
    if kind is FaultKind.PANIC:
        raise InjectedPanic(f"injected panic before {point}")
    return kind


def recovering(point: str) -> None:
    """Called by a driver that deliberately works around the failure of ``point`` by another route (the
    S3 driver's single-object delete after a refused multi-object delete). Only then may an operation
    whose step failed return normally, and only with the answer and the effect of an unfailed one."""
    plan = _ACTIVE.get()
    if plan is not None:
        plan.recovered.append(point)
