"""Sizes and assertions shared by the stress tests (test_stress_*.py).

Default run: WORKERS=4 workers (threads, processes or Spark tasks) x DEFAULT_SPEC (3 keys, 8 rounds,
6 random ops and 6 polling reads per round): about 370 recorded operations per history, per backend.
``-m stress``: STRESS_WORKERS=8 threads/processes (Spark: 4 tasks, the local[4] slots) x STRESS_SPEC
(4 keys, 30 rounds, 30 random ops): about 8,900 operations per thread/process history, 4,400 per Spark
history. Planted-bug runs: bug_spec() (1 key, 8 rounds): each contention phase is a barrier-synchronized
burst that lands inside the bug's sleep window, and the one key makes rounds 0, 3, 6 create bursts and at
least three of the others CAS bursts (every worker holding one token), so a run has several chances to
trip on each bug: one burst missed by a descheduled task must not hide it.
"""

from __future__ import annotations

from typing import Any

import pytest

from contract_tests.history import History
from contract_tests.linearizability import KeyVerdict, check_history
from contract_tests.planted_bugs import PLANTED_BUGS
from contract_tests.workloads import WorkloadSpec

WORKERS = 4
DEFAULT_SPEC = WorkloadSpec(keys=3, rounds=8, random_ops=6, reads_per_round=6)
STRESS_WORKERS = 8
STRESS_SPEC = WorkloadSpec(keys=4, rounds=30, random_ops=30, reads_per_round=8, seed=7)
CHECK_BUDGET_S = 120.0


def bug_spec() -> WorkloadSpec:
    return WorkloadSpec(keys=1, rounds=8, random_ops=2, reads_per_round=8)


def skip_unless_shared(adapter: Any) -> None:
    capabilities = adapter.capabilities
    if not capabilities.shared_across_processes:
        pytest.skip(
            f"{capabilities.backend}: capabilities.shared_across_processes is False "
            "(each process has its own store), so other processes cannot race on it"
        )


def planted(adapter: Any, bug: str) -> Any:
    """The planted-bug adapter ``bug`` (contract_tests.planted_bugs) over the same store and prefix."""
    return PLANTED_BUGS[bug](adapter.url, **dict(adapter.config.options))


def assert_linearizable(history: History, minimum_ops: int) -> None:
    assert len(history) >= minimum_ops
    result = check_history(history, time_budget_s=CHECK_BUDGET_S)
    print(f"\n{result.report()}")
    assert result.verdict is KeyVerdict.LINEARIZABLE, result.report()


def assert_caught(history: History) -> None:
    result = check_history(history, time_budget_s=CHECK_BUDGET_S)
    print(f"\n{result.report()}")
    assert result.verdict is KeyVerdict.VIOLATION, result.report()
    for key in result.violations:
        assert 0 < len(key.counterexample) <= key.operations
