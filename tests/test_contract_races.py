"""The planned races of contract_tests.concurrency_clauses: the serial model they are judged by, how their
errors are judged, the deadline of a race, and the observed (not declared) sharing across processes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from contract_tests.concurrency_clauses import (
    _explained,
    cas_race_plan,
    crossing_rename_plan,
    observed_sharing,
    prune_race_plan,
    rename_cas_plan,
    require_processes,
    run_planned,
)
from contract_tests.planted_bugs import PlantedBugAdapter, open_misdeclared_per_process
from contract_tests.race_tasks import Call, Move
from contract_tests.races import RaceTimeout, Sync, race_in_processes, race_in_threads
from contract_tests.verdicts import Inconclusive, Violation
from storage_adapter import open_adapter
from storage_adapter.errors import BackendUnavailableError, StorageError

X, Y, C = b"x-body", b"y-body", b"cas-body"


def answered(move: Move, result: str) -> Call:
    return Call(racer=0, round=0, move=move, result=result)


def crossing(final_x: bytes | None, final_y: bytes | None, atomic: bool) -> bool:
    """Whether a -> b crossing b -> a, both answering "moved", may leave ``final``."""
    there, back = Move("rename", "a", target="b", setup=X), Move("rename", "b", target="a", setup=Y)
    initial = {"a": (X, "a"), "b": (Y, "b")}
    calls = [answered(there, "moved"), answered(back, "moved")]
    return _explained(calls, initial, {"a": final_x, "b": final_y}, atomic)


def test_crossing_atomic_renames_keep_exactly_one_object() -> None:
    assert crossing(X, None, atomic=True) and crossing(None, Y, atomic=True)
    assert not crossing(None, None, atomic=True)  # both lost
    assert not crossing(X, Y, atomic=True)  # neither moved, both answered "moved"
    assert not crossing(Y, X, atomic=True)  # a swap: two renames cannot both read the other's source first


def test_copy_then_delete_renames_may_lose_both_but_never_swap() -> None:
    """Where renames are not atomic, a copy is a read then a write, and the delete comes last: both reads
    first, then a -> b writes and deletes a, then b -> a writes a (with y) and deletes b."""
    assert crossing(None, None, atomic=False) and crossing(Y, None, atomic=False)
    assert not crossing(X, Y, atomic=False)  # each rename deletes its source after copying it
    assert not crossing(Y, X, atomic=False)  # a delete always follows its own write


def test_a_cas_that_overwrites_a_later_delete_is_unexplained() -> None:
    cas = Move("write_if_match", "k", C, setup=X)
    delete = Move("delete", "k")
    initial = {"k": (X, "k")}
    assert _explained([answered(cas, "won"), answered(delete, "ok")], initial, {"k": None}, True)
    assert _explained([answered(cas, "lost"), answered(delete, "ok")], initial, {"k": None}, True)
    assert not _explained([answered(cas, "won"), answered(delete, "ok")], initial, {"k": C}, True)


def test_a_cas_on_the_source_of_a_rename_is_lost_only_if_the_rename_is_not_atomic() -> None:
    rename = Move("rename", "s", target="d", setup=X)
    cas = Move("write_if_match", "s", C, setup=X)
    calls = [answered(rename, "moved"), answered(cas, "won")]
    final = {"s": None, "d": C}  # the CAS won first, the rename moved its body
    assert _explained(calls, {"s": (X, "s")}, final, atomic=True)
    resurrected = {"s": C, "d": X}  # the CAS won after the move
    assert not _explained(calls, {"s": (X, "s")}, resurrected, atomic=True)
    assert not _explained(calls, {"s": (X, "s")}, resurrected, atomic=False)
    lost = {"s": None, "d": X}  # the CAS won between the copy and the delete, which then removed it
    assert not _explained(calls, {"s": (X, "s")}, lost, atomic=True)
    assert _explained(calls, {"s": (X, "s")}, lost, atomic=False)


@pytest.mark.parametrize(
    "plan",
    [cas_race_plan(2, 3), prune_race_plan(2, 3), rename_cas_plan(2, 3), crossing_rename_plan(4, 4)],
    ids=["cas", "prune", "rename-cas", "crossing"],
)
def test_every_plan_passes_on_memory_and_local(plan: Any, tmp_path: Any) -> None:
    for url in ("memory://races-plans", f"file://{tmp_path}"):
        run_planned(open_adapter(url).child(f"p{time.monotonic_ns()}"), plan)


class _FailingDeletes(PlantedBugAdapter):
    """Deletes raise ``error`` (after deleting, as a spurious error would)."""

    error: Exception = StorageError("failed: delete on local: [Errno 39] Directory not empty")

    def delete(self, key: str) -> None:
        self.inner.delete(key)
        raise self.error


class _TransientDeletes(_FailingDeletes):
    error = BackendUnavailableError("HTTP 503 after retries")


def test_an_error_that_is_no_outcome_is_a_violation_naming_it() -> None:
    adapter = _FailingDeletes(open_adapter("memory://races-failing"))
    with pytest.raises(Violation) as caught:
        run_planned(adapter, cas_race_plan(2, 2))
    message = str(caught.value)
    assert message.startswith(
        "2 call(s) raised an error that is not an outcome of the call (StorageError x2)"
    )
    assert "delete('cas-race/p1/r0') -> raised StorageError: failed: delete" in message


def test_a_transient_error_leaves_the_clause_inconclusive() -> None:
    adapter = _TransientDeletes(open_adapter("memory://races-transient"))
    with pytest.raises(Inconclusive, match="2 call\\(s\\) failed transiently"):
        run_planned(adapter, cas_race_plan(2, 2))


def _hang(index: int, sync: Sync) -> None:
    time.sleep(3600)


def test_a_hung_race_times_out_and_its_processes_are_killed_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(RaceTimeout, match="did not report within 1 s"):
        race_in_processes(2, _hang, timeout_s=1.0)
    assert time.monotonic() - started < 15  # not the 30 s join per racer of a completed race


def test_a_hung_thread_race_times_out() -> None:
    release = threading.Event()
    try:
        with pytest.raises(RaceTimeout, match="racer-1"):
            race_in_threads(2, lambda i, sync: release.wait() if i else None, timeout_s=0.5)
    finally:
        release.set()


def test_sharing_is_observed_not_declared(tmp_path: Any) -> None:
    local = open_adapter(f"file://{tmp_path}/shared")
    assert observed_sharing(local)[0] is True
    require_processes(local)  # declared and observed: runs
    with pytest.raises(Violation, match="declares shared_across_processes=False, but its store is shared"):
        require_processes(open_misdeclared_per_process(f"file://{tmp_path}/lying"))
    with pytest.raises(pytest.skip.Exception, match="per-process \\(declared, and observed"):
        require_processes(open_adapter("memory://races-sharing"))
    assert local.list() == []  # the probe cleaned up after itself
