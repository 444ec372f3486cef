"""Type and lint checks run with the tests, so CI fails on a type error or a lint finding."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def test_mypy_is_clean() -> None:
    """Strict on the core, clean on the rest of the package (settings in pyproject.toml)."""
    done = _tool("mypy")
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_ruff_is_clean() -> None:
    done = _tool("ruff", "check", ".")
    assert done.returncode == 0, done.stdout[-5000:]
