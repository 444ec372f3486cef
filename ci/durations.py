"""The tables of docs/ci.md from a run's ``--durations-json`` file: time per test file and the slowest tests.

    python ci/durations.py results/test-durations.json [--top 20]

Prints Markdown; paste it over the tables under "Where the time goes" in docs/ci.md after a full run.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def tables(report: dict[str, object], top: int) -> str:
    tests = report["tests"]
    assert isinstance(tests, list)
    per_file: dict[str, list[float]] = defaultdict(list)
    for test in tests:
        per_file[test["nodeid"].split("::")[0]].append(test["seconds"])
    total = sum(sum(times) for times in per_file.values())
    lines = [
        f"pytest wall time {float(report['wall_s']) / 60:.1f} min for {len(tests)} tests "
        f"(`-m '{report['markexpr']}'`); the sum of test durations is {total / 60:.1f} min.",
        "",
        "| file | tests | seconds | share |",
        "|---|---:|---:|---:|",
    ]
    for name, times in sorted(per_file.items(), key=lambda item: -sum(item[1])):
        lines.append(f"| `{name}` | {len(times)} | {sum(times):.0f} | {100 * sum(times) / total:.1f}% |")
    lines += [
        "",
        f"The {top} slowest tests (setup + call + teardown):",
        "",
        "| seconds | test |",
        "|---:|---|",
    ]
    for test in tests[:top]:
        lines.append(f"| {test['seconds']:.1f} | `{test['nodeid']}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    print(tables(json.loads(args.report.read_text()), args.top), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
