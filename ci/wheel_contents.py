"""The wheel's files against the list the tests keep (ci/wheel-contents.txt), for ci/wheel-stage.

    python ci/wheel_contents.py dist/storage_adapter-0.2.0-py3-none-any.whl [--list ci/wheel-contents.txt]
    python ci/wheel_contents.py dist/storage_adapter-0.2.0-py3-none-any.whl --write   # after adding a file

The list names every file the wheel must hold, one path a line (``#`` starts a comment), the metadata
folder as ``{dist-info}/`` whatever the version. The verdict, exit status 1 on a failure:

* a listed file the wheel lacks fails (a module, ``py.typed`` or metadata that would ship missing);
* a file outside this project's names (a top-level folder or module other than ``storage_adapter/`` and
  ``contract_tests/``, or anything beside ``{dist-info}/``: a generic top-level ``servers`` package, a ``tests`` folder, a
  ``.data`` folder) fails, listed or not: the wheel installs this project's names only;
* a file inside this project's names that the list lacks (a new module) is printed, to be added with
  ``--write``, and does not fail: a branch that adds a module does not break CI for it, and the list
  still says what is guaranteed to ship.
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

LIST = Path(__file__).resolve().parent / "wheel-contents.txt"
DIST_INFO = "{dist-info}"
# The wheel's only top-level names: the two import packages and the distribution's metadata.
OURS = ("storage_adapter", "contract_tests", DIST_INFO)
_DIST_INFO_DIR = re.compile(r"^[^/]+\.dist-info(?=/)")


def wheel_files(wheel: Path) -> list[str]:
    """The wheel's file paths, sorted, its ``<name>-<version>.dist-info/`` folder spelled ``{dist-info}/``."""
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if not name.endswith("/")]
    return sorted(_DIST_INFO_DIR.sub(DIST_INFO, name) for name in names)


def listed_files(path: Path = LIST) -> list[str]:
    """The paths the list names (blank lines and ``#`` comments left out)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return sorted(line for line in lines if line)


@dataclass(frozen=True)
class Verdict:
    missing: list[str]  # listed, not in the wheel: fails
    foreign: list[str]  # outside this project's names: fails
    unlisted: list[str]  # inside them but not listed: reported only

    @property
    def ok(self) -> bool:
        return not self.missing and not self.foreign


def compare(found: list[str], listed: list[str]) -> Verdict:
    """How the wheel's files (``found``) stand against the list (see the module's rules)."""
    present, wanted = set(found), set(listed)
    foreign = sorted(
        name for name in present | wanted if name.split("/", 1)[0] not in OURS or "/" not in name
    )
    return Verdict(
        missing=sorted(wanted - present),
        foreign=foreign,
        unlisted=sorted(present - wanted - set(foreign)),
    )


HEADER = """\
# Every file the wheel must hold (ci/wheel-stage checks it with ci/wheel_contents.py, which says what a
# missing, an unlisted and a foreign file mean). Regenerate after adding or removing a shipped file:
#   python -m build --outdir dist . && python ci/wheel_contents.py dist/*.whl --write
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--list", type=Path, default=LIST, help="the list (default: ci/wheel-contents.txt)")
    parser.add_argument("--write", action="store_true", help="write the wheel's files as the list")
    args = parser.parse_args(argv)
    found = wheel_files(args.wheel)
    if args.write:
        args.list.write_text(HEADER + "".join(f"{name}\n" for name in found), encoding="utf-8")
        print(f"wheel contents: wrote {len(found)} files to {args.list}")
    verdict = compare(found, listed_files(args.list))
    for name in verdict.missing:
        print(f"wheel contents: MISSING {name} (listed in {args.list.name}, not in the wheel)")
    for name in verdict.foreign:
        print(f"wheel contents: FOREIGN {name} (not under {', '.join(n + '/' for n in OURS)})")
    for name in verdict.unlisted:
        print(f"wheel contents: unlisted {name} (ships; add it with --write to guarantee it)")
    print(
        f"wheel contents: {len(found)} files, {len(verdict.missing)} missing, {len(verdict.foreign)} foreign,"
        f" {len(verdict.unlisted)} unlisted: {'ok' if verdict.ok else 'FAILED'}"
    )
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
