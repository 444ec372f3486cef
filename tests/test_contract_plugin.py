"""The contract as a downstream project uses it: from another directory, through the pytest11 plugin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contract_tests.clauses import AdapterContract

PLUGIN_ARGS = ["-p", "no:cacheprovider", "-q", "--contract-processes", "2", "--contract-increments", "5"]


def run_pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *PLUGIN_ARGS, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def summary(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]


def test_pyargs_run_against_a_local_url_from_another_directory(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    # A sample of clauses that write, race in threads and processes, and delete their prefixes (every
    # clause runs on a local root in tests/test_contract_embedded.py; the subclass test below checks
    # that every clause is collected).
    sample = (
        "round_trip_bytes or delete_prefix or cas_increments_processes or write_if_absent_one_winner_threads"
    )
    result = run_pytest(
        tmp_path, "--pyargs", "contract_tests", "--storage-url", f"mine=file://{root}", "-k", sample
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "passed" in summary(result) and "failed" not in summary(result)
    assert (
        "[mine]"
        in run_pytest(
            tmp_path, "--pyargs", "contract_tests", "--co", "--storage-url", f"mine=file://{root}"
        ).stdout
    )
    assert list(root.iterdir()) == [], "the suite left objects behind outside its prefixes"


def test_storage_url_is_mirrored_as_an_ini_setting(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nstorage_url =\n    ini-local=file://{tmp_path}/b\n")
    result = run_pytest(tmp_path, "--pyargs", "contract_tests", "--co")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[ini-local]" in result.stdout


def test_downstream_subclass_runs_every_clause_on_its_own_adapter(tmp_path: Path) -> None:
    (tmp_path / "test_my_store.py").write_text(
        "import uuid, pytest\n"
        "from contract_tests import AdapterContract\n"
        "from storage_adapter import open_adapter\n\n"
        "class TestMyStore(AdapterContract):\n"
        "    @pytest.fixture\n"
        "    def adapter(self, tmp_path):\n"
        "        yield open_adapter(f'file://{tmp_path}').child(f'p-{uuid.uuid4().hex}')\n"
    )
    # Every clause is collected on the subclass; a sample that needs the adapter fixture in threads and
    # in spawned processes runs (the whole suite runs on the same local adapter in the pyargs test above).
    collected = run_pytest(tmp_path, "test_my_store.py", "--co")
    clauses = {line.split("::")[-1].split("[")[0] for line in collected.stdout.splitlines() if "::" in line}
    assert clauses == {name for name in dir(AdapterContract) if name.startswith("test_")}
    sample = "round_trip_bytes or cas_increments_processes or write_if_absent_one_winner_threads"
    result = run_pytest(tmp_path, "test_my_store.py", "-k", sample)
    assert result.returncode == 0, result.stdout[-3000:]
    assert summary(result).startswith("3 passed"), summary(result)


def test_unknown_embedded_target_is_a_usage_error(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "--pyargs", "contract_tests", "--storage-embedded", "no-such-server")
    assert result.returncode != 0
    assert "unknown ['no-such-server']" in result.stdout + result.stderr
