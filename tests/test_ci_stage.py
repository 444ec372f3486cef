"""``ci/contract-stage``, the bash wrapper over ``storage-adapter check --server NAME`` / ``check URL``:
against an ``s3://`` URL from the environment (the stage scripts/test.sh runs, on a SeaweedFS it starts, is
run end to end by tests/test_hostile_environment.py, with a user's AWS environment),
failing on a planted bug, and its exits when a server cannot run (3 with one reason; 0 + SKIPPED only on
request) or the target is not understood (2).

Sizes of the end-to-end runs: 4 threads, 2 processes, 5 CAS increments per worker (the defaults are 8, 4
and 25; scripts/test.sh runs the stage at the defaults). Results are read from the ``--report`` JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from storage_adapter.servers.containers import MINIO_IMAGE, MinIO, RustFS

REPO = Path(__file__).resolve().parent.parent
STAGE = REPO / "ci" / "contract-stage"
SMALL = ["--threads", "4", "--processes", "2", "--increments", "5"]
LINEARIZABILITY = (
    "test_mixed_history_is_linearizable_threads",
    "test_mixed_history_is_linearizable_processes",
)


def run_stage(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTEST_"))}
    return subprocess.run(
        [str(STAGE), *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )


def outcomes(report: dict[str, Any], target: str) -> dict[str, str]:
    """clause -> pass/fail/skip/error of one target in a ``--report`` JSON."""
    return {r["clause"]: r["outcome"] for r in report["results"] if r["target"] == target}


def test_stage_against_an_s3_url_from_the_environment(embedded_seaweedfs: Any, tmp_path: Path) -> None:
    """The path a downstream CI takes: its own endpoint, credentials in AWS_*, a bucket/prefix URL. The
    clauses run are those that open the URL in the check's process and in spawned ones (the whole contract
    runs on this server in the stage of scripts/test.sh and in tests/test_contract_embedded.py; a whole
    check here cost 58 s)."""
    url = embedded_seaweedfs.url("stage-url-test")
    result = run_stage(
        url,
        *SMALL,
        "--clauses",
        "round_trip or linearizable",
        "--report",
        str(tmp_path / "stage"),
        env=embedded_seaweedfs.environment(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "stage.json").read_text())
    assert [(t["name"], t["url"], t["peer"]) for t in report["targets"]] == [("stage", url, False)]
    rows = outcomes(report, "stage")
    assert rows["test_round_trip_bytes"] == rows[LINEARIZABILITY[0]] == rows[LINEARIZABILITY[1]] == "pass"
    assert set(rows.values()) == {"pass"}
    assert "stage: conforms - " in result.stdout


# Over the default tier's budget (65 s, a whole check on SeaweedFS). The default tier proves its parts:
# the clauses catch this planted bug (tests/test_contract_self_test.py) and a failing judged target makes
# the check exit 1 (tests/test_cli_check.py).
@pytest.mark.stress
def test_stage_fails_on_a_planted_cas_race(embedded_seaweedfs: Any, tmp_path: Path) -> None:
    """The stage is not vacuous: an adapter whose write_if_match is an unserialized read-compare-write
    (``--factory``, passed through to ``check``) fails the CAS races and both linearizability checks, and
    the stage exits 1."""
    result = run_stage(
        embedded_seaweedfs.url("stage-planted"),
        *SMALL,
        "--report",
        str(tmp_path / "stage"),
        "--factory",
        "contract_tests.planted_bugs:open_racy_cas",
        env=embedded_seaweedfs.environment(),
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "stage.json").read_text())
    assert report["targets"][0]["factory"] == "contract_tests.planted_bugs:open_racy_cas"
    rows = outcomes(report, "stage")
    assert rows["test_cas_fresh_token_wins"] == "pass"  # a single caller cannot see the race
    for clause in ("test_cas_increments_threads", *LINEARIZABILITY):
        assert rows[clause] == "fail", clause
    assert rows["test_round_trip_bytes"] == "pass"  # only the planted bug is caught
    assert "stage: VIOLATES " in result.stdout


@pytest.mark.parametrize("server", ["minio", "rustfs"])
def test_stage_fails_with_one_reason_when_docker_is_missing(server: str, tmp_path: Path) -> None:
    no_docker = f"unix://{tmp_path}/no-docker.sock"
    result = run_stage(server, env={"DOCKER_HOST": no_docker})
    assert result.returncode == 3
    (line,) = (result.stdout + result.stderr).strip().splitlines()
    assert line.startswith(f"storage-adapter check: {server} cannot run here: {server} needs Docker: ")
    assert f"no Docker engine reachable at {no_docker}" in line


def test_stage_skips_only_when_asked(tmp_path: Path) -> None:
    result = run_stage(
        "minio", "--allow-unavailable", env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    )
    assert result.returncode == 0
    (line,) = (result.stdout + result.stderr).strip().splitlines()
    assert line.startswith("SKIPPED minio: minio needs Docker: no Docker engine reachable at ")


def test_unknown_server_is_a_usage_error() -> None:
    result = run_stage("no-such-server")
    assert result.returncode == 2
    assert (
        "invalid choice: 'no-such-server' (choose from 'seaweedfs', 'minio', 'rustfs', 'ceph', 'moto', 'azurite')"
        in result.stderr
    )


@pytest.mark.parametrize("args", [[], ["--threads", "4"], ["/some/dir"]], ids=["none", "option", "path"])
def test_a_target_that_is_neither_a_server_nor_a_storage_url_gets_the_usage_line(args: list[str]) -> None:
    result = run_stage(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        "usage: ci/contract-stage seaweedfs|minio|rustfs|azurite|s3://bucket[/prefix]|az://container[/prefix] "
        "[storage-adapter check options]"
    )


def test_container_servers_report_their_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the report's versions name for MinIO/RustFS (no Docker needed): the image reference."""
    assert MinIO().version() == MINIO_IMAGE
    monkeypatch.setenv(RustFS.image_variable(), "rustfs/rustfs:1.0.0-rc.6")
    assert RustFS().version() == "rustfs/rustfs:1.0.0-rc.6"


def test_stage_writes_junit_and_the_step_summary_even_when_the_server_cannot_run(tmp_path: Path) -> None:
    """The stage hands CI its results in every case: JUnit XML at results/contract-junit.xml of the working
    directory (or $CONTRACT_JUNIT), and the step summary appended to $GITHUB_STEP_SUMMARY. Here the server
    cannot run and --allow-unavailable accepts it, so both say skipped (exit 0), never an error."""
    no_docker = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    summary = tmp_path / "step-summary.md"
    result = run_stage(
        "minio", "--allow-unavailable", env={**no_docker, "GITHUB_STEP_SUMMARY": str(summary)}, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    junit = (tmp_path / "results" / "contract-junit.xml").read_text()
    assert '<skipped message="SKIPPED: ServerCannotRun: minio: minio needs Docker: ' in junit
    assert summary.read_text().startswith("### storage-adapter check: SKIPPED\n")
    chosen = tmp_path / "elsewhere" / "junit.xml"
    result = run_stage("minio", env={**no_docker, "CONTRACT_JUNIT": str(chosen)}, cwd=tmp_path)
    assert result.returncode == 3
    assert '<error type="not-run" message="NOT RUN: ServerCannotRun: minio: ' in chosen.read_text()
