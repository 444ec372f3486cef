"""``ci/contract-stage``: end to end on SeaweedFS (the stage .ci/run runs here), against an ``s3://`` URL
from the environment, and its exits when a server cannot run (fail with one reason; skip only on request).

Sizes of the end-to-end run: 4 threads, 2 processes, 5 CAS increments per worker (the defaults are 8, 4
and 25; scripts/test.sh runs the stage at the defaults).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
STAGE = REPO / "ci" / "contract-stage"
SMALL = ["--threads", "4", "--processes", "2", "--increments", "5"]


@pytest.fixture(scope="module")
def stage() -> Iterator[ModuleType]:
    """The stage script imported as a module (it has no .py suffix, so through an explicit loader)."""
    loader = importlib.machinery.SourceFileLoader("contract_stage", str(STAGE))
    spec = importlib.util.spec_from_loader("contract_stage", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["contract_stage"] = module  # dataclasses resolve annotations through sys.modules
    try:
        loader.exec_module(module)
        yield module
    finally:
        del sys.modules["contract_stage"]


def run_stage(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTEST_"))}
    return subprocess.run(
        [sys.executable, str(STAGE), *args],
        cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def matrix(stdout: str) -> dict[str, str]:
    """Rows of the printed conformance matrix: clause -> PASS/FAIL/SKIP."""
    body = stdout.split("\nConformance matrix: ", 1)[1]
    return {m[1]: m[2] for m in re.finditer(r"^(\S.*?)\s{2,}(PASS|FAIL|SKIP)\b", body, re.MULTILINE)}


def test_seaweedfs_stage_end_to_end(tmp_path: Path) -> None:
    result = run_stage("seaweedfs", *SMALL, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    rows = matrix(result.stdout)
    for clause in ("round_trip_bytes", "write_if_absent_one_winner_processes", "cas_increments_processes",
                   "invalid_keys_rejected_everywhere", "capabilities_are_declared_and_honest"):  # fmt: skip
        assert rows.get(clause) == "PASS", clause
    assert rows["linearizable: 4 threads"] == "PASS"
    assert rows["linearizable: 2 processes"] == "PASS"
    assert "FAIL" not in rows.values()
    assert re.search(r"^CONTRACT STAGE seaweedfs: PASSED \(\d+ passed, 0 failed", result.stdout, re.MULTILINE)


def test_stage_against_an_s3_url_from_the_environment(embedded_seaweedfs: Any, tmp_path: Path) -> None:
    """The path a downstream CI takes: its own endpoint, credentials in AWS_*, a bucket/prefix URL."""
    url = embedded_seaweedfs.url("stage-url-test")
    result = run_stage(
        url, "--no-concurrency-checks", "--", "-k", "round_trip_bytes or write_if_absent_creates_once",
        env=embedded_seaweedfs.environment(), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert matrix(result.stdout) == {
        "round_trip_bytes": "PASS",
        "write_if_absent_creates_once": "PASS",
        "concurrency checks": "SKIP",
    }
    assert f"--storage-url s3={url}" in result.stdout


def test_stage_fails_on_a_planted_cas_race(embedded_seaweedfs: Any, tmp_path: Path) -> None:
    """The stage is not vacuous: an adapter whose write_if_match is an unserialized read-compare-write
    fails the CAS clause and both linearizability checks, and the stage exits 1."""
    result = run_stage(
        embedded_seaweedfs.url("stage-planted"), "--storage-factory", "contract_tests.planted_bugs:open_racy_cas",
        *SMALL, "--", "-k", "cas_increments_threads or cas_fresh_token_wins",
        env=embedded_seaweedfs.environment(), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-4000:]
    assert matrix(result.stdout) == {
        "cas_fresh_token_wins": "PASS",  # a single caller cannot see the race
        "cas_increments_threads": "FAIL",
        "linearizable: 4 threads": "FAIL",
        "linearizable: 2 processes": "FAIL",
    }
    assert "CONTRACT STAGE s3: FAILED (1 passed, 3 failed, 0 skipped)" in result.stdout


@pytest.mark.parametrize("server", ["minio", "rustfs"])
def test_stage_fails_with_one_reason_when_docker_is_missing(server: str, tmp_path: Path) -> None:
    no_docker = f"unix://{tmp_path}/no-docker.sock"
    result = run_stage(server, env={"DOCKER_HOST": no_docker})
    assert result.returncode == 3
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"CONTRACT STAGE {server}: NOT RUN: {server} needs Docker: ")
    assert f"no Docker engine reachable at {no_docker}" in line


def test_stage_skips_only_when_asked(tmp_path: Path) -> None:
    result = run_stage("minio", "--allow-skip", env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})
    assert result.returncode == 0
    (line,) = result.stdout.strip().splitlines()
    assert line.startswith("SKIPPED minio: minio needs Docker: no Docker engine reachable at ")
    assert "PASSED" not in result.stdout


def test_unknown_target_is_a_usage_error() -> None:
    result = run_stage("ceph")
    assert result.returncode == 2
    assert "unknown S3 server provider 'ceph'; choose from seaweedfs, minio, rustfs" in result.stderr


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="contract_tests.test_contract.TestAdapterContract" name="test_round_trip_bytes[s3]"/>
<testcase classname="c" name="test_invalid_keys_rejected_everywhere[s3-'a//b']"/>
<testcase classname="c" name="test_invalid_keys_rejected_everywhere[s3-'..']">
  <failure message="AssertionError: write('..') created an object&#10;second line">trace</failure></testcase>
<testcase classname="c" name="test_atomic_replace_processes[s3]">
  <skipped type="pytest.skip" message="per-process store">skip</skipped></testcase>
</testsuite></testsuites>"""


def test_matrix_folds_cases_and_a_failed_case_fails_the_clause_and_the_stage(
    stage: ModuleType, capsys: Any
) -> None:
    rows = stage.clause_rows(JUNIT)
    assert [(r.row, r.outcome) for r in rows] == [
        ("round_trip_bytes", "PASS"),
        ("invalid_keys_rejected_everywhere", "FAIL"),
        ("atomic_replace_processes", "SKIP"),
    ]
    assert rows[1].detail == "2 cases; AssertionError: write('..') created an object"
    assert rows[2].detail == "per-process store"
    target = stage.StageTarget(name="s3", url="s3://b", description="s3://b")
    assert stage.verdict(target, rows) == stage.EXIT_FAILED
    assert "CONTRACT STAGE s3: FAILED (1 passed, 1 failed, 1 skipped)" in capsys.readouterr().out


def test_arguments_after_double_dash_go_to_pytest(stage: ModuleType) -> None:
    args, extra = stage.parse_arguments(["minio", "--threads", "3", "--", "-k", "cas", "--threads"])
    assert (args.target, args.threads, args.allow_skip) == ("minio", 3, False)
    assert extra == ["-k", "cas", "--threads"]
