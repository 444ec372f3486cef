"""ci/wheel-stage's check of the wheel's files (ci/wheel_contents.py) fails when it should: a listed file
missing, a file outside this project's names; a new module it only reports. And the list the tests keep
is sound: this project's names only, the typed markers and the metadata in it. (The stage itself, a
build and a clean venv, runs in scripts/test.sh before pytest: docs/ci.md.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "ci" / "wheel_contents.py"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wheel_contents", CHECKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


wheel_contents = _checker()
LISTED = wheel_contents.listed_files()


def _wheel(tmp_path: Path, names: list[str]) -> Path:
    """A wheel-shaped zip holding ``names`` (``{dist-info}`` spelled as a real version's folder)."""
    path = tmp_path / "storage_adapter-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name.replace("{dist-info}", "storage_adapter-9.9.9.dist-info"), b"")
    return path


def _check(wheel: Path) -> subprocess.CompletedProcess[str]:
    """The checker as the stage runs it, against the list the tests keep."""
    return subprocess.run(
        [sys.executable, str(CHECKER), str(wheel)], capture_output=True, text=True, timeout=60
    )


def test_a_wheel_with_every_listed_file_passes(tmp_path: Path) -> None:
    done = _check(_wheel(tmp_path, LISTED))
    assert done.returncode == 0, done.stdout
    assert f"{len(LISTED)} files, 0 missing, 0 foreign, 0 unlisted: ok" in done.stdout


@pytest.mark.parametrize(
    "dropped",
    ["storage_adapter/py.typed", "{dist-info}/entry_points.txt", "storage_adapter/servers/seaweedfs.py"],
)
def test_a_wheel_missing_a_listed_file_fails_naming_it(tmp_path: Path, dropped: str) -> None:
    done = _check(_wheel(tmp_path, [name for name in LISTED if name != dropped]))
    assert done.returncode == 1, done.stdout
    assert f"MISSING {dropped}" in done.stdout and "FAILED" in done.stdout


@pytest.mark.parametrize(
    "stray",
    # "servers" + "/...": spelled apart, so the rename script's sed (re-run after merges) leaves it alone
    ["servers" + "/__init__.py", "backends/__init__.py", "tests/test_x.py", "conftest.py"],
)
def test_a_file_outside_this_projects_names_fails(tmp_path: Path, stray: str) -> None:
    """A generic top-level package (the old ``servers``), a test folder or a loose module would land in a
    user's site-packages beside everyone else's: the wheel installs storage_adapter and contract_tests only."""
    done = _check(_wheel(tmp_path, [*LISTED, stray]))
    assert done.returncode == 1, done.stdout
    assert f"FOREIGN {stray}" in done.stdout


def test_a_new_module_of_the_package_is_reported_without_failing(tmp_path: Path) -> None:
    done = _check(_wheel(tmp_path, [*LISTED, "storage_adapter/brand_new.py"]))
    assert done.returncode == 0, done.stdout
    assert "unlisted storage_adapter/brand_new.py" in done.stdout


def test_write_makes_the_list_that_then_passes(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, [*LISTED, "contract_tests/brand_new.py"])
    listing = tmp_path / "contents.txt"
    done = subprocess.run(
        [sys.executable, str(CHECKER), str(wheel), "--list", str(listing), "--write"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
    assert wheel_contents.listed_files(listing) == sorted([*LISTED, "contract_tests/brand_new.py"])


def test_the_kept_list_names_this_projects_files_only_and_what_must_ship() -> None:
    verdict = wheel_contents.compare(LISTED, LISTED)
    assert verdict.foreign == []
    assert {
        "storage_adapter/py.typed",
        "contract_tests/py.typed",
        "contract_tests/plugin.py",
        "contract_tests/cli.py",
        "storage_adapter/servers/seaweedfs.py",
        "{dist-info}/METADATA",
        "{dist-info}/entry_points.txt",
    } <= set(LISTED)


def test_every_listed_module_exists_in_the_tree() -> None:
    """A listed source file deleted from the tree would fail the stage only after a build: say it here."""
    gone = [name for name in LISTED if not name.startswith("{") and not (ROOT / name).is_file()]
    assert gone == []


def test_the_test_command_runs_the_wheel_stage_before_pytest() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert script.index("ci/wheel-stage") < script.index("-m pytest")
