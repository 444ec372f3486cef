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


SKIP, OFF = "# fmt: " + "skip", "# fmt: " + "off"  # spelled apart, so this file holds neither marker


def test_the_formatter_owns_the_layout() -> None:
    """``ruff format`` leaves every file as it is, and a ``# fmt: skip`` (a hand layout the formatter must
    not touch) is rare and says beside it why the hand layout reads better."""
    done = _tool(
        "ruff", "format", "--check", *(str(p) for p in sorted(ROOT.rglob("*.py")) if ".venv" not in p.parts)
    )
    assert done.returncode == 0, done.stdout[-5000:]
    markers = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in ROOT.rglob("*.py")
        if ".venv" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.rstrip().endswith(SKIP) or OFF in line
    ]
    assert not markers, f"a hand layout needs its reason beside it (# fmt: skip  (why)): {markers}"
