"""`storage-adapter check`: the conformance run, its matrix and reports, and one-line bad-input errors.

Most tests run a tiny suite (a temporary test module using the plugin's ``adapter`` fixture) through
``run_contract``, so they are fast and their expected outcomes are fixed; the CLI tests run the real
contract on memory and local with small race sizes, and the embedded-defaults run (the README's main job).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from contract_tests.conformance import ClauseOutcome, ContractRunError, Target, run_contract
from contract_tests.report import report_paths, to_markdown, write_report
from storage_adapter.servers.server import free_port

TINY_SUITE = '''
import pytest

class TestTiny:
    def test_round_trip(self, storage_contract_adapter):
        """Bytes round-trip."""
        storage_contract_adapter.write("k", b"v")
        assert storage_contract_adapter.read_bytes("k") == b"v"

    def test_exists_is_for_objects_only(self, storage_contract_adapter):
        storage_contract_adapter.write("a/b", b"v")
        assert not storage_contract_adapter.exists("a"), "a prefix reported as an object"

    def test_always_skips(self, storage_contract_adapter):
        pytest.skip("nothing to check here")

    @pytest.mark.parametrize("case", ["one", "two"])
    def test_parametrized(self, storage_contract_adapter, case):
        storage_contract_adapter.write(case, case)
        assert storage_contract_adapter.read_text(case) == case

    def test_not_a_contract_clause(self):
        assert True
'''
PEER = "contract_tests.peers:open_peer"


@pytest.fixture
def tiny_suite(tmp_path: Path) -> tuple[str, ...]:
    # A unique module name: run_contract runs pytest in this process, where modules stay imported.
    path = tmp_path / f"test_tiny_{uuid.uuid4().hex[:8]}.py"
    path.write_text(TINY_SUITE)
    return (str(path),)


def _run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contract_tests", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_run_contract_collects_one_result_per_clause_and_target(
    tiny_suite: tuple[str, ...], tmp_path: Path
) -> None:
    targets = [
        Target("memory", "memory://tiny-check"),
        Target("local", f"file://{tmp_path}/local"),
        Target("fsspec-memory", "memory://tiny-peer", factory=PEER, peer=True),
    ]
    run = run_contract(targets, suite=tiny_suite)
    assert [c.name for c in run.clauses] == [
        "test_round_trip",
        "test_exists_is_for_objects_only",
        "test_always_skips",
        "test_parametrized",
    ]
    assert run.clauses[0].summary == "Bytes round-trip."
    assert len(run.results) == 4 * 3  # clause x target; the non-contract test is not a clause
    assert run.result("test_always_skips", "local").outcome is ClauseOutcome.SKIPPED
    assert run.result("test_always_skips", "local").reason == "nothing to check here"
    parametrized = run.result("test_parametrized", "memory")
    assert (parametrized.outcome, parametrized.cases) == (ClauseOutcome.PASSED, 2)
    peer_exists = run.result("test_exists_is_for_objects_only", "fsspec-memory")
    assert (
        peer_exists.outcome is ClauseOutcome.FAILED and "a prefix reported as an object" in peer_exists.reason
    )
    assert run.verdict(targets[0]).conforms and run.verdict(targets[1]).conforms
    assert run.verdict(targets[2]).violations == ("test_exists_is_for_objects_only",)
    assert run.conforms, "a failing peer must not make the run non-conforming"
    assert dict(run.versions)["obstore"]


def test_a_failing_judged_target_makes_the_run_non_conforming(tiny_suite: tuple[str, ...]) -> None:
    judged_peer = Target("judged-fsspec", "memory://tiny-judged", factory=PEER, peer=False)
    run = run_contract([judged_peer], suite=tiny_suite)
    assert not run.conforms
    assert "VIOLATES 1 clause" in run.verdict(judged_peer).line()


def test_listener_sees_every_clause(tiny_suite: tuple[str, ...]) -> None:
    seen: list[tuple[str, str, ClauseOutcome]] = []
    collected: dict[str, int] = {}

    class Listener:
        def collected(self, target: str, clauses: int) -> None:
            collected[target] = clauses

        def finished(self, target: str, clause: str, outcome: ClauseOutcome) -> None:
            seen.append((target, clause, outcome))

    run_contract([Target("memory", "memory://tiny-listener")], suite=tiny_suite, listener=Listener())
    assert collected == {"memory": 4}
    assert len(seen) == 4 and ("memory", "test_parametrized", ClauseOutcome.PASSED) in seen


def test_a_suite_that_does_not_run_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ContractRunError, match="did not run"):
        run_contract([Target("memory", "memory://x")], suite=(str(tmp_path / "no_such_suite.py"),))


def test_reports_are_markdown_and_json(tiny_suite: tuple[str, ...], tmp_path: Path) -> None:
    targets = [
        Target("memory", "memory://tiny-report"),
        Target("fsspec-memory", "memory://tiny-report-peer", factory=PEER, peer=True),
    ]
    run = run_contract(targets, suite=tiny_suite)
    md_path, json_path = write_report(run, tmp_path / "out" / "check.json")
    assert (md_path.name, json_path.name) == ("check.md", "check.json")
    report = json.loads(json_path.read_text())
    assert report["conforms"] is True
    assert {t["name"]: t["peer"] for t in report["targets"]} == {"memory": False, "fsspec-memory": True}
    assert {(r["clause"], r["target"], r["outcome"]) for r in report["results"]} >= {
        ("test_exists_is_for_objects_only", "fsspec-memory", "fail"),
        ("test_always_skips", "memory", "skip"),
    }
    assert "| exists_is_for_objects_only | pass | FAIL [" in to_markdown(run)
    assert report_paths(tmp_path) == (
        tmp_path / "storage-adapter-check.md",
        tmp_path / "storage-adapter-check.json",
    )


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["ftp://bucket/x"], {}, "unsupported storage URL"),
        (
            ["s3://bucket/x"],
            {
                "AWS_ENDPOINT_URL": "http://127.0.0.1:{port}",
                "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": "key",
                "AWS_SECRET_ACCESS_KEY": "secret",
            },  # signed: no chain lookup
            "BackendUnavailableError",
        ),
        (
            ["file:///proc/storage-adapter-cannot-write-here"],
            {},
            "file:///proc/storage-adapter-cannot-write-here",
        ),
        (["memory://a", "memory://a"], {}, "same name"),
        (["--server", "seaweedfs", "memory://a"], {}, "--server seaweedfs starts and checks its own server"),
        (["--server", "minio", "--factory", "no_such_module:open"], {}, "cannot load adapter factory"),
    ],
    ids=[
        "unknown-scheme",
        "unreachable-endpoint",
        "unwritable-directory",
        "duplicate-names",
        "server-with-url",
        "bad-factory-before-any-server-starts",
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], env: dict[str, str], expected: str) -> None:
    env = {k: v.format(port=free_port()) for k, v in env.items()}
    result = _run_cli("check", *args, env=env, timeout=120)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert "Traceback" not in output
    assert len(output.splitlines()) == 1, output
    assert expected in output


def test_check_cli_on_memory_and_local(tmp_path: Path) -> None:
    """The real contract through the CLI: judged memory + local (no peers), report written, exit 0. The
    clauses run are the races in threads and spawned processes and the round trips: what the CLI's own
    plumbing (sizes, targets, spawned workers, report) reaches. Every clause runs through the CLI in
    scripts/test.sh's SeaweedFS stage, and on memory and local in tests/test_contract_embedded.py (the
    whole check here cost 36-55 s)."""
    report = tmp_path / "report"
    result = _run_cli(
        "check",
        "memory://cli-check",
        f"file://{tmp_path}/local",
        "--no-peers",
        "--clauses",
        "processes or cas_increments or round_trip",
        "--threads",
        "4",
        "--processes",
        "2",
        "--increments",
        "3",
        "--report",
        str(report),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "memory:cli-check: conforms" in result.stdout
    assert "overall: conforms" in result.stdout
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["sizes"] == {
        "threads": 4,
        "processes": 2,
        "increments": 3,
        "check_budget_s": 60.0,
        "clause_timeout_s": 300.0,
    }
    clauses = {c["name"] for c in data["clauses"]}
    assert {"test_write_if_absent_one_winner_processes", "test_cas_increments_threads"} <= clauses
    assert report.with_suffix(".md").exists()


def test_check_clauses_runs_a_selection_and_says_so(tmp_path: Path) -> None:
    """``--clauses EXPR`` (pytest's -k over clause names) runs only the matching clauses; the verdict line
    and both reports say the run was a selection. An expression that matches nothing, or is not one, is
    bad input (exit 2) before any clause runs, and the report says why."""
    report = tmp_path / "sel"
    result = _run_cli(
        "check",
        "memory://cli-sel",
        "--no-peers",
        "--clauses",
        "cas_stale or round_trip_bytes",
        "--report",
        str(report),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "overall: conforms (only the clauses selected by --clauses 'cas_stale or round_trip_bytes')" in (
        result.stdout
    )
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["selection"] == "cas_stale or round_trip_bytes"
    assert {r["clause"] for r in data["results"]} == {
        "test_cas_stale_token_gets_none",
        "test_round_trip_bytes",
    }
    assert "only the clauses selected by --clauses" in report.with_suffix(".md").read_text()
    for expression in ("no_such_clause", "cas and ("):
        bad = _run_cli(
            "check", "memory://cli-sel", "--no-peers", "--clauses", expression, "--report", str(report)
        )
        assert bad.returncode == 2, bad.stdout[-3000:] + bad.stderr[-3000:]
        assert f"--clauses {expression!r} selects no clause of the contract" in bad.stdout + bad.stderr
        assert json.loads(report.with_suffix(".json").read_text())["status"] == "not-run"


def test_check_cli_peer_failures_do_not_change_the_exit_status() -> None:
    result = _run_cli("check", "mem=memory://cli-peers", "--threads", "4", "--increments", "3")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "fsspec-memory:mem (peer, not judged): VIOLATES" in result.stdout
    assert "mem: conforms" in result.stdout
