"""The GitHub Actions workflow: valid against the GitHub workflow schema, and it runs the stages it claims.

Validation uses check-jsonschema's vendored copy of the SchemaStore workflow schema
(``--builtin-schema vendor.github-workflows``), so it needs no network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"
NIGHTLY = REPO / ".github" / "workflows" / "nightly.yml"


def check_jsonschema() -> str:
    beside = Path(sys.executable).with_name("check-jsonschema")
    found = str(beside) if beside.exists() else shutil.which("check-jsonschema")
    if found is None:
        pytest.fail("check-jsonschema is not installed (it is in the dev extra)")
    return found


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def load_workflow(path: Path = WORKFLOW) -> dict[Any, Any]:
    # PyYAML reads the key `on` as the boolean True (YAML 1.1); the structure below does not need it.
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def run_commands(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def uses(job: dict[str, Any], action: str) -> dict[str, Any]:
    matches = [step for step in job["steps"] if step.get("uses", "").startswith(f"{action}@")]
    assert len(matches) == 1, f"expected one {action} step in {job.get('name')}"
    return matches[0]


@pytest.mark.parametrize("path", [WORKFLOW, NIGHTLY], ids=["ci", "nightly"])
def test_workflow_validates_against_the_github_schema(path: Path) -> None:
    result = validate(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    """The validation is not vacuous: the same workflow re-serialized passes, and without a job's runs-on
    it fails, naming the missing property."""
    workflow = load_workflow()

    def write(name: str) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump({("on" if k is True else k): v for k, v in workflow.items()}))
        return path

    assert validate(write("same.yml")).returncode == 0
    del workflow["jobs"]["tests"]["runs-on"]
    result = validate(write("broken.yml"))
    assert result.returncode != 0
    assert "'runs-on' is a required property" in result.stdout


def test_tests_job_runs_the_readme_test_command_with_python_and_java() -> None:
    job = load_workflow()["jobs"]["tests"]
    assert job["runs-on"] == "ubuntu-latest"
    assert "bash scripts/test.sh" in run_commands(job)
    assert str(uses(job, "actions/setup-python")["with"]["python-version"]) == "3.11"
    java = uses(job, "actions/setup-java")["with"]
    assert str(java["java-version"]) == "17"
    assert java["distribution"]


def test_nightly_runs_the_heavy_tiers_through_the_test_command() -> None:
    jobs = load_workflow(NIGHTLY)["jobs"]
    assert "bash scripts/test.sh -m stress" in run_commands(jobs["stress"])
    assert run_commands(jobs["servers"]) == [
        "bash scripts/install-ceph.sh",
        "bash scripts/test.sh -m servers",
    ]
    assert True in load_workflow(NIGHTLY) and "schedule" in load_workflow(NIGHTLY)[True]


def test_rustfs_minio_job_runs_the_contract_stage_against_both_servers() -> None:
    job = load_workflow(NIGHTLY)["jobs"]["s3-servers"]
    assert job["name"].startswith("RustFS/MinIO")
    assert job["runs-on"] == "ubuntu-latest"  # GitHub's hosted Ubuntu runners come with a Docker engine
    assert sorted(job["strategy"]["matrix"]["server"]) == ["minio", "rustfs"]
    assert job["strategy"]["fail-fast"] is False
    stage = [c for c in run_commands(job) if "ci/contract-stage" in c]
    assert stage == ["bash ci/contract-stage ${{ matrix.server }}"]  # the stage is a bash script
    # Where Docker is expected, an unavailable engine must fail the job (exit 3), never pass it as skipped.
    assert not any("--allow-unavailable" in c or "--allow-skip" in c for c in run_commands(job))
    assert str(uses(job, "actions/setup-python")["with"]["python-version"]) == "3.11"
    assert str(uses(job, "actions/setup-java")["with"]["java-version"]) == "17"


def test_stage_script_the_workflow_calls_is_an_executable_wrapper_over_check() -> None:
    stage = REPO / "ci" / "contract-stage"
    assert stage.is_file()
    assert stage.stat().st_mode & 0o111
    text = stage.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert subprocess.run(["bash", "-n", str(stage)], capture_output=True, timeout=30).returncode == 0
    # The logic lives in the package; the stage adds only where CI finds the results (JUnit, summary).
    assert '-m contract_tests check "${target[@]}" --no-peers "${results[@]}" "$@"' in text
