"""Recorded histories from threads and OS processes on every backend are linearizable; the planted bugs
are caught every run.

Sizes are in tests/stress_support.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
from stress_support import (
    DEFAULT_SPEC,
    STRESS_SPEC,
    STRESS_WORKERS,
    WORKERS,
    assert_caught,
    assert_linearizable,
    bug_spec,
    planted,
    skip_unless_shared,
)

from contract_tests.planted_bugs import PLANTED_BUGS
from contract_tests.workloads import run_processes, run_threads
from storage_adapter import open_adapter


def test_thread_history_is_linearizable(adapter) -> None:
    assert_linearizable(run_threads(adapter, DEFAULT_SPEC, WORKERS), minimum_ops=300)


def test_process_history_is_linearizable(adapter) -> None:
    skip_unless_shared(adapter)
    assert_linearizable(run_processes(adapter, DEFAULT_SPEC, WORKERS), minimum_ops=300)


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_planted_bug_is_caught_in_threads(adapter, bug: str) -> None:
    assert_caught(run_threads(planted(adapter, bug), bug_spec(), WORKERS))


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_planted_bug_is_caught_in_processes(adapter, bug: str) -> None:
    skip_unless_shared(adapter)
    assert_caught(run_processes(planted(adapter, bug), bug_spec(), WORKERS))


def test_a_planted_bug_run_gives_the_cas_race_several_synchronized_bursts() -> None:
    """A planted lost update is caught only in a burst where every worker holds the same token: one
    burst missed by a descheduled task (a loaded CI host, Spark tasks) must not make the run miss the
    bug (it did on a loaded CI host, with 2 bursts per run). A burst: every worker's write_if_match
    carries one token."""
    history = run_threads(open_adapter("memory://bursts/run"), bug_spec(), WORKERS)
    tokens = Counter(op.args[1] for op in history.operations if op.op == "write_if_match")
    bursts = [token for token, callers in tokens.items() if callers >= WORKERS]
    assert len(bursts) >= 3, tokens


def test_memory_store_refuses_a_process_run(adapter) -> None:
    if adapter.capabilities.shared_across_processes:
        pytest.skip(f"{adapter.backend} is shared across processes")
    with pytest.raises(ValueError, match="shared_across_processes"):
        run_processes(adapter, DEFAULT_SPEC, 2)


@pytest.mark.stress
def test_stress_thread_history_is_linearizable(adapter) -> None:
    assert_linearizable(run_threads(adapter, STRESS_SPEC, STRESS_WORKERS), minimum_ops=8000)


@pytest.mark.stress
def test_stress_process_history_is_linearizable(adapter) -> None:
    skip_unless_shared(adapter)
    assert_linearizable(run_processes(adapter, STRESS_SPEC, STRESS_WORKERS), minimum_ops=8000)
