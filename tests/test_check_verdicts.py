"""Every clause ends with a verdict within a bound (issue 13): pass, fail with evidence, or inconclusive,
never a hang and never a violation that was not found; the reports carry the evidence and are written in
every case; the exit status tells all-pass, violations, inconclusive and could-not-run apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from contract_tests.conformance import (
    ClauseOutcome,
    ConformanceRun,
    RunStatus,
    Target,
    TargetVerdict,
    run_contract,
)
from contract_tests.plugin import ContractSizes
from contract_tests.report import to_json, to_markdown
from storage_adapter import open_adapter
from storage_adapter.servers.server import free_port

ROOT = Path(__file__).resolve().parent.parent
SMALL = ContractSizes(threads=4, processes=2, increments=5, check_budget_s=30.0, clause_timeout_s=60.0)


def _run(factory: str, clauses: str, sizes: ContractSizes = SMALL) -> ConformanceRun:
    target = Target("fake", f"memory://verdicts-{uuid.uuid4().hex[:8]}", factory=factory)
    return run_contract([target], sizes=sizes, suite=("--pyargs", "contract_tests", "-k", clauses))


def _outcomes(run: ConformanceRun) -> dict[str, ClauseOutcome]:
    return {r.clause.removeprefix("test_"): r.outcome for r in run.results}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "contract_tests", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def test_a_cas_that_never_succeeds_fails_fast_with_evidence() -> None:
    """Before: cas_increments retried a rejected CAS forever (the check hung on Ceph RGW 16.2)."""
    started = time.monotonic()
    run = _run(
        "contract_tests.planted_bugs:open_rejecting_cas", "cas_increments_threads or cas_fresh_token_wins"
    )
    assert time.monotonic() - started < 60
    assert _outcomes(run) == {
        "cas_fresh_token_wins": ClauseOutcome.FAILED,
        "cas_increments_threads": ClauseOutcome.FAILED,
    }
    (increments,) = [r for r in run.results if r.clause == "test_cas_increments_threads"]
    assert "never succeeds" in increments.reason
    assert "0 of 40 uncontended CAS attempts succeeded" in increments.evidence
    assert run.status is RunStatus.VIOLATIONS


def test_a_call_that_never_returns_fails_at_the_clause_deadline() -> None:
    """Before: a clause blocked in a storage call had no deadline (the run waited forever)."""
    sizes = ContractSizes(threads=2, processes=2, increments=2, check_budget_s=5.0, clause_timeout_s=2.0)
    started = time.monotonic()
    run = _run(
        "contract_tests.planted_bugs:open_hanging_cas", "cas_fresh_token_wins or round_trip_bytes", sizes
    )
    assert time.monotonic() - started < 30
    assert _outcomes(run) == {
        "cas_fresh_token_wins": ClauseOutcome.FAILED,
        "round_trip_bytes": ClauseOutcome.PASSED,
    }
    (hung,) = [r for r in run.results if r.outcome is ClauseOutcome.FAILED]
    assert hung.reason.startswith("did not finish within 2 s")
    assert "write_if_match" in hung.evidence  # where it is blocked


def test_a_search_cut_off_by_its_budget_is_inconclusive_not_a_violation() -> None:
    """Before: the linearizability checker's UNKNOWN failed the clause and was counted as a violation."""
    sizes = ContractSizes(threads=4, processes=2, increments=5, check_budget_s=0.0, clause_timeout_s=60.0)
    started = time.monotonic()
    run = _run("storage_adapter:open_adapter", "mixed_history_is_linearizable_threads", sizes)
    assert time.monotonic() - started < 60
    (result,) = run.results
    assert result.outcome is ClauseOutcome.INCONCLUSIVE
    assert "ran out of its 0 s budget" in result.reason and "unknown" in result.evidence
    verdict = run.verdict(run.targets[0])
    assert verdict.violations == () and verdict.inconclusive == (result.clause,)
    assert run.status is RunStatus.INCONCLUSIVE and not run.conforms


def test_a_counterexample_reaches_every_report_format() -> None:
    """Before: the reports kept a truncated first line; the offending history was dropped."""
    run = _run("contract_tests.planted_bugs:open_racy_cas", "mixed_history_is_linearizable_threads")
    (result,) = run.results
    assert result.outcome is ClauseOutcome.FAILED
    assert result.reason == "the history is not linearizable"
    assert "violation:" in result.evidence and "key 'stress/" in result.evidence
    assert "write_if_match" in result.evidence  # the operations of the shrunk history, with their intervals
    assert result.evidence in to_markdown(run)
    (row,) = to_json(run)["results"]
    assert row["evidence"] == result.evidence and row["outcome"] == "fail"


def test_a_compatibility_mode_is_declared_and_never_conforming() -> None:
    adapter = open_adapter("s3://bucket/p", endpoint="http://127.0.0.1:9", unquoted_if_match=True)
    assert adapter.capabilities.compatibility_modes == ("unquoted-if-match",)
    assert open_adapter("s3://bucket/p", endpoint="http://127.0.0.1:9").capabilities.compatibility_modes == ()
    target = Target("ceph", "s3://bucket/p")
    failing = TargetVerdict(
        target,
        37,
        1,
        0,
        0,
        ("test_write_or_delete_racing_a_cas_is_never_lost",),
        compatibility_modes=("unquoted-if-match",),
    )
    assert failing.line() == (
        "ceph: PARTIAL with compatibility mode unquoted-if-match, VIOLATES 1 clause(s) - 37 passed, 0 skipped; "
        "write_or_delete_racing_a_cas_is_never_lost"
    )
    passing = TargetVerdict(target, 38, 0, 0, 0, (), compatibility_modes=("unquoted-if-match",))
    assert not passing.conforms and "PARTIAL" in passing.line() and "conforms" not in passing.line()


def test_cli_exit_4_for_inconclusive_only_with_plain_progress_and_reports(tmp_path: Path) -> None:
    """Inconclusive only exits 4 (before: 1, a violation), and stdout that is not a terminal gets one
    progress line per clause with its elapsed time (before: nothing until the matrix)."""
    result = _cli(
        "memory://x", "--no-peers", "--check-budget", "0", "--report", str(tmp_path / "r"), cwd=tmp_path
    )
    assert result.returncode == 4, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("memory:x: ") and line.endswith(" clauses") for line in lines)
    assert any(
        "] memory:x " in line and "mixed_history_is_linearizable_threads: inconclusive (" in line
        for line in lines
    )
    assert "INCONCLUSIVE" in result.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "inconclusive" and report["targets"][0]["violations"] == []
    assert report["versions"]["server"] == "none (no URL of a service with an endpoint)"
    assert "## Evidence" in (tmp_path / "r.md").read_text()


def test_cli_preflight_failure_still_writes_a_report(tmp_path: Path) -> None:
    """Before: a failed preflight exited 2 with one line and no report."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    env_args = ("s3://nowhere/p", "--no-peers", "--report", str(tmp_path / "r"))
    os.environ.update()  # the endpoint goes through the child's environment only
    result = subprocess.run(
        [sys.executable, "-m", "contract_tests", "check", *env_args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
        },
    )
    assert result.returncode == 2, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "not-run" and report["results"] == []
    assert "nowhere" in report["not_run"] and "InputError" in report["not_run"]
    assert report["versions"]["server"] == f"unknown (user-supplied endpoint {endpoint})"
    assert "NOT RUN" in (tmp_path / "r.md").read_text()


@pytest.mark.parametrize("flag", ["--server", "--compat"])
def test_cli_bad_input_still_writes_a_report(flag: str, tmp_path: Path) -> None:
    args = (
        ["memory://x", "--server", "seaweedfs"] if flag == "--server" else ["memory://x", "--compat", "nope"]
    )
    result = _cli(*args, "--report", str(tmp_path / "r"), cwd=tmp_path)
    assert result.returncode == 2
    if flag == "--server":  # argparse rejects an unknown choice before any check exists to report on
        assert json.loads((tmp_path / "r.json").read_text())["status"] == "not-run"
