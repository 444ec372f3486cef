"""Clauses on failures: an injected backend fault surfaces as the right typed error, never as an outcome
(None, False, an empty listing, success), and a failed operation leaves no partial state.

Faults are injected below the driver (:mod:`storage_adapter.faults`): each I/O step an operation takes
(an obstore request, a system call of the local backend) is failed in turn, one per attempt, with the
error the library raises for an outage (HTTP 503 / ETIMEDOUT), a refusal (403 / EACCES) or a broken
request (400 / EIO). The sweep ends when an operation completes without reaching the planned step.

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` fixture the clauses use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from contract_tests.bodies import describe
from contract_tests.verdicts import Violation
from storage_adapter.errors import (
    BackendUnavailableError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
)
from storage_adapter.faults import FaultKind, FaultPlan, injected
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import Capabilities, DirListing, Versioned

# The error each kind of fault must surface as. A broken request is a plain StorageError: neither
# "absent", nor "retry", nor "denied".
EXPECTED_ERROR: dict[FaultKind, type[StorageError]] = {
    FaultKind.UNAVAILABLE: BackendUnavailableError,
    FaultKind.DENIED: PermissionDeniedError,
    FaultKind.BROKEN: StorageError,
    FaultKind.PANIC: StorageError,
}
_MORE_SPECIFIC = (NotFoundError, BackendUnavailableError, PermissionDeniedError)
# No operation takes more I/O steps than this; one that does is reported rather than swept forever.
MAX_STEPS = 64

State = tuple[tuple[tuple[str, bytes], ...], tuple[str, ...]]


@dataclass(frozen=True)
class FaultedOperation:
    """An operation to fail at each of its steps: ``prepare`` builds the state it starts from (and returns
    what ``run`` needs). ``atomic(capabilities)`` says whether it must leave the state before or the state
    after; a non-atomic copy-then-delete rename may also leave both (as a crash would), and a non-atomic
    multi-object operation any mix of the two (``partial``)."""

    name: str
    prepare: Callable[[StorageAdapter], Any]
    run: Callable[[StorageAdapter, Any], Any]
    atomic: Callable[[Capabilities], bool] = lambda capabilities: True
    partial: bool = False


def _atomic_rename(capabilities: Capabilities) -> bool:
    return capabilities.atomic_rename


def _seed(adapter: StorageAdapter) -> str:
    adapter.write("d/other", b"bystander")
    return adapter.write("d/k", b"v1")


OPERATIONS = (
    FaultedOperation("read_bytes", _seed, lambda a, _: a.read_bytes("d/k")),
    FaultedOperation("read_versioned", _seed, lambda a, _: a.read_versioned("d/k")),
    FaultedOperation("read_if_exists", _seed, lambda a, _: a.read_if_exists("d/k")),
    FaultedOperation("read_if_exists(absent)", _seed, lambda a, _: a.read_if_exists("d/absent")),
    FaultedOperation("exists", _seed, lambda a, _: a.exists("d/k")),
    FaultedOperation("exists(absent)", _seed, lambda a, _: a.exists("d/absent")),
    FaultedOperation("list", _seed, lambda a, _: a.list("d")),
    FaultedOperation("list_dir", _seed, lambda a, _: a.list_dir("")),
    FaultedOperation("write", _seed, lambda a, _: a.write("d/k", b"v2")),
    FaultedOperation("write(new directory)", _seed, lambda a, _: a.write("e/f/k", b"v2")),
    FaultedOperation("write_if_absent", _seed, lambda a, _: a.write_if_absent("e/k", b"v2")),
    FaultedOperation("write_if_absent(present)", _seed, lambda a, _: a.write_if_absent("d/k", b"v2")),
    FaultedOperation("write_if_match", _seed, lambda a, token: a.write_if_match("d/k", b"v2", token)),
    FaultedOperation("write_if_match(stale)", _seed, lambda a, _: a.write_if_match("d/k", b"v2", '"stale"')),
    FaultedOperation("delete", _seed, lambda a, _: a.delete("d/k")),
    FaultedOperation("delete(absent)", _seed, lambda a, _: a.delete("d/absent")),
    FaultedOperation("rename", _seed, lambda a, _: a.rename("d/k", "e/k"), _atomic_rename),
    FaultedOperation("rename(missing source)", _seed, lambda a, _: a.rename("d/absent", "e/k")),
    FaultedOperation("delete_prefix", _seed, lambda a, _: a.delete_prefix("d"), partial=True),
    FaultedOperation("iter_list", _seed, lambda a, _: list(a.iter_list("d"))),
    FaultedOperation(
        "delete_many", _seed, lambda a, _: a.delete_many(["d/k", "d/absent", "d/other"]), partial=True
    ),
)


def _state(adapter: StorageAdapter) -> State:
    """What a reader can see: every object's bytes, and the root's child prefixes."""
    objects = tuple((info.key, adapter.read_bytes(info.key)) for info in adapter.list())
    return objects, adapter.list_dir("").prefixes


def _allowed(
    operation: FaultedOperation, capabilities: Capabilities, before: State, done: State
) -> list[State]:
    """The states a failed ``operation`` may leave (None: any)."""
    allowed = [before, done]
    if not operation.atomic(capabilities):
        objects = tuple(sorted(set(before[0]) | set(done[0])))
        allowed.append((objects, tuple(sorted(set(before[1]) | set(done[1])))))
    return allowed


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """The call's result, or the StorageError it raised; anything else (an untranslated error, a panic)
    is returned as the error too, so the clause reports it instead of crashing on it."""
    try:
        return call(), None
    except Exception as exc:
        return None, exc
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return None, exc


def _answer(result: Any) -> Any:
    """What a result says, without what differs between two runs (tokens, times)."""
    if isinstance(result, str):
        return str  # a token: any token
    if isinstance(result, Versioned):
        return result.data
    if isinstance(result, DirListing):
        return [o.key for o in result.objects], list(result.prefixes)
    if isinstance(result, list):
        return [getattr(item, "key", item) for item in result]
    return result


def _misreported(kind: FaultKind, error: BaseException | None, recovered: bool) -> str | None:
    """Why ``error`` is not how a fault of ``kind`` must surface (None when it is). Returning normally is
    allowed only when the driver said it worked around the failed step by another route
    (storage_adapter.faults.recovering, as the S3 driver does when its multi-object delete is refused)
    and the answer and the state are those of the unfailed operation (``recovered``)."""
    if error is None:
        return None if recovered else "returned normally"
    expected = EXPECTED_ERROR[kind]
    wrong_kind = expected is StorageError and isinstance(error, _MORE_SPECIFIC)
    if not isinstance(error, expected) or wrong_kind:
        return f"raised {type(error).__name__} ({error}), not {expected.__name__}"
    return None


def _sweep(adapter: StorageAdapter, operation: FaultedOperation, kind: FaultKind) -> tuple[int, list[str]]:
    """Fail steps of ``operation`` one at a time (each attempt under a prefix of its own below
    ``adapter``); return the steps it takes and the violations found. A broken-request fault is tried at
    every step; the other kinds, whose handling differs by the kind of call rather than by its place, at
    the first step of each kind of call (the first read, the first rename, ...)."""
    adapter.write("keep", b"")  # every attempt then prunes the same directories: its own, no more
    control = adapter.child("control")
    recorder = FaultPlan(kind, skip=MAX_STEPS)
    token = operation.prepare(control)
    with injected(recorder):
        unfailed, _ = _outcome(lambda: operation.run(control, token))
    expected = _answer(unfailed)
    points = recorder.passed[:MAX_STEPS]
    done = _state(control)
    if len(recorder.passed) >= MAX_STEPS:
        return MAX_STEPS, [f"{operation.name}: takes more than {MAX_STEPS} I/O steps"]
    chosen = (
        range(len(points))
        if kind is FaultKind.BROKEN
        else sorted({p: i for i, p in reversed(list(enumerate(points)))}.values())
    )
    problems = []
    for step in chosen:
        scope = adapter.child(f"step-{step}")
        token = operation.prepare(scope)
        before = _state(scope)
        plan = FaultPlan(kind, skip=step)
        with injected(plan):
            result, error = _outcome(partial(operation.run, scope, token))
        if not plan.fired:
            problems.append(
                f"{operation.name}: step {step} ({points[step]}) not reached again (nondeterministic I/O)"
            )
            continue
        where = f"{operation.name}, {kind.value} fault at step {step} ({plan.fired[0]})"
        after = _state(scope)
        scope.remove_orphans(0)  # what a failed cleanup step (an injected unlink fault) left behind
        recovered = bool(plan.recovered) and _answer(result) == expected and after == done
        why = _misreported(kind, error, recovered)
        if why is not None:
            shown = (
                f" {describe(result)} (unfailed: {describe(expected)}; state {describe(after)})"
                if error is None
                else ""
            )
            problems.append(f"{where}: {why}{shown}")
        if not operation.partial and after not in _allowed(operation, adapter.capabilities, before, done):
            problems.append(
                f"{where}: left a partial state {describe(after)} (before {describe(before)}, "
                f"done {describe(done)})"
            )
    return len(points), problems


class FailureClauses:
    """Failures are reported as the right typed error and leave no partial state."""

    @pytest.mark.parametrize("kind", list(FaultKind), ids=lambda k: k.value)
    def test_injected_faults_are_reported_never_mistaken_for_outcomes(
        self, adapter: StorageAdapter, kind: FaultKind
    ) -> None:
        """Every operation, failed at each of its I/O steps in turn with an outage (503 / ETIMEDOUT), a
        refusal (403 / EACCES) or a broken request (400 / EIO), raises BackendUnavailableError (the transient class),
        PermissionDeniedError or a plain StorageError respectively: never an outcome (None from a CAS or
        create, False from exists, None from read_if_exists, an empty listing, a silent success). An atomic
        operation leaves what a reader sees as it was, or as the unfailed operation leaves it (a fault
        after the effect); never anything in between."""
        steps, problems = {}, []
        for number, operation in enumerate(OPERATIONS):
            steps[operation.name], found = _sweep(adapter.child(f"op-{number}"), operation, kind)
            problems += found
        if not any(steps.values()):
            pytest.skip("this adapter's drivers mark no fault points (storage_adapter.faults)")
        if problems:
            raise Violation(
                f"{len(problems)} injected {kind.value} faults misreported or leaving partial state",
                "\n".join(problems[:40]) + f"\nI/O steps per operation: {steps}",
            )
