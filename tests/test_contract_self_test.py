"""The contract can fail: run the whole suite against deliberately broken adapters and name the clauses
that catch each bug (contract_tests.planted_bugs). A clause that cannot fail would be a defect."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

LINEARIZABILITY = {
    "test_mixed_history_is_linearizable_threads",
    "test_mixed_history_is_linearizable_processes",
}
CATCHING_CLAUSES = {
    "racy_cas": {
        "test_cas_increments_threads",
        "test_cas_increments_processes",
        "test_write_or_delete_racing_a_cas_is_never_lost",
        "test_rename_racing_cas_on_both_keys_is_linearizable",
        *LINEARIZABILITY,
    },
    "torn_write": {"test_atomic_replace_threads", "test_atomic_replace_processes", *LINEARIZABILITY},
    "check_then_act_create": {
        "test_write_if_absent_one_winner_threads",
        "test_write_if_absent_one_winner_processes",
        *LINEARIZABILITY,
    },
    # Capabilities are checked, not believed.
    "copying_rename": {
        "test_rename_racing_cas_on_both_keys_is_linearizable",
        "test_crossing_renames_finish_and_keep_every_object",
        "test_readers_racing_renames_see_the_object_once",
    },
    "misdeclared_per_process": {
        "test_shared_across_processes_is_observed",
        "test_atomic_replace_processes",
        "test_write_if_absent_one_winner_processes",
        "test_cas_increments_processes",
        "test_mixed_history_is_linearizable_processes",
    },
}


# A bug's run selects the clauses that must catch it (the rest of the suite runs on the real adapter in
# tests/test_contract_embedded.py, and the control below runs every selected clause there): the same
# verdicts in 57 s instead of 102 s (each bug's run took all 14 clauses before).
SELECTED = " or ".join(sorted(set().union(*CATCHING_CLAUSES.values())))


def selected(bug: str) -> str:
    return " or ".join(sorted(CATCHING_CLAUSES[bug]))


def failed_clauses(junit: Path) -> set[str]:
    failed = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(case.get("name", "").split("[", 1)[0])
    return failed


@pytest.mark.parametrize("bug", sorted(CATCHING_CLAUSES))
def test_planted_bug_is_caught_by_its_clauses(bug: str, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--pyargs",
            "contract_tests",
            "--storage-url",
            f"planted=file://{tmp_path}/root",
            "--storage-factory",
            f"contract_tests.planted_bugs:open_{bug}",
            "--contract-processes",
            "3",
            "--contract-increments",
            "8",
            f"--junitxml={junit}",
            "-k",
            selected(bug),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    failed = failed_clauses(junit)
    missing = CATCHING_CLAUSES[bug] - failed
    assert not missing, f"{bug} slipped past {sorted(missing)}; the suite failed only {sorted(failed)}"
    print(f"{bug}: caught by {sorted(failed)}")


def test_the_same_suite_passes_on_the_real_adapter(tmp_path: Path) -> None:
    """Control: the configuration used above is green without the planted bug."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--pyargs",
            "contract_tests",
            "--storage-url",
            f"real=file://{tmp_path}/root",
            "--contract-processes",
            "3",
            "--contract-increments",
            "8",
            "-k",
            SELECTED,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"{len(set().union(*CATCHING_CLAUSES.values()))} passed" in result.stdout, result.stdout[-3000:]
