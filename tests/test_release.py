"""The release's version and changelog agree (RELEASING.md): pyproject.toml's version, the one source,
has its dated section in CHANGELOG.md, in Keep a Changelog's shape, with a migration note."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def sections() -> dict[str, str]:
    """Each ``## [name]`` section's text, by name."""
    parts = re.split(r"^## \[([^\]]+)\][^\n]*\n", CHANGELOG, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_version_has_its_dated_section_below_unreleased() -> None:
    names = list(sections())
    assert names[:2] == ["Unreleased", VERSION], names
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", CHANGELOG, re.MULTILINE)


def test_each_release_uses_keep_a_changelog_kinds_and_the_release_has_a_migration_note() -> None:
    for name, text in sections().items():
        headings = re.findall(r"^### (.+)$", text, re.MULTILINE)
        kinds = [h for h in headings if not h.startswith("Migration")]
        assert set(kinds) <= KINDS, (name, kinds)
    assert "### Migration from" in sections()[VERSION]


def test_the_version_is_written_once() -> None:
    """No ``__version__`` to keep in step: importlib.metadata answers from pyproject.toml's."""
    offenders = [
        str(p.relative_to(ROOT))
        for package in ("storage_adapter", "contract_tests")
        for p in (ROOT / package).rglob("*.py")
        if re.search(r"^__version__\s*=", p.read_text(), re.MULTILINE)
    ]
    assert offenders == []
