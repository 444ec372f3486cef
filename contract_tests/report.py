"""Present a ConformanceRun: the clause x backend matrix (rich), and Markdown and JSON report files
(JUnit XML and the CI step summary: :mod:`contract_tests.ci_report`).

All formats carry the same facts: the overall status (conforms, violations, inconclusive, or not run with
the reason), each target's verdict line (PARTIAL when it relies on compatibility modes), every non-pass
reason whole, for every failing or inconclusive clause its evidence (the counterexample history,
expected vs actual) as the clause stated it, and for every judged target whose root holds entries
listings leave out (another tool's: docs/listing.md) how many and the first of them, with their reasons;
nothing about those where there are none. The report files keep evidence whole; the console folds a
long one (:func:`fold`) and says where it is whole.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from contract_tests.conformance import (
    PACKAGES,
    ClauseOutcome,
    ClauseResult,
    ConformanceRun,
    LeftOut,
    RunStatus,
)
from contract_tests.targets import Target

_CELL_STYLE = {
    ClauseOutcome.PASSED: "green",
    ClauseOutcome.FAILED: "bold red",
    ClauseOutcome.ERROR: "bold red",
    ClauseOutcome.INCONCLUSIVE: "yellow",
    ClauseOutcome.NOT_RUN: "yellow",
    ClauseOutcome.SKIPPED: "dim",
}
_CELL_TEXT = {
    ClauseOutcome.PASSED: "pass",
    ClauseOutcome.FAILED: "FAIL",
    ClauseOutcome.ERROR: "ERROR",
    ClauseOutcome.INCONCLUSIVE: "INCONCLUSIVE",
    ClauseOutcome.NOT_RUN: "not run",
    ClauseOutcome.SKIPPED: "skip",
}
REPORT_FORMAT = "storage-adapter-check/2"
_OVERALL = {
    RunStatus.CONFORMS: "conforms",
    RunStatus.VIOLATIONS: "VIOLATIONS",
    RunStatus.INCONCLUSIVE: "INCONCLUSIVE (no violation found; some clauses could not decide)",
    RunStatus.NOT_RUN: "NOT RUN",
}


def ordered_targets(run: ConformanceRun) -> list[Target]:
    """Judged targets first, then peers, each in the order given."""
    return [t for t in run.targets if not t.peer] + [t for t in run.targets if t.peer]


def _heading(target: Target) -> str:
    return f"{target.name}\n(peer)" if target.peer else target.name


def notes(run: ConformanceRun) -> list[tuple[int, str]]:
    """Numbered reasons for every non-pass cell; identical reasons share a number."""
    numbered: dict[str, int] = {}
    for target in ordered_targets(run):
        for clause in run.clauses:
            result = run.result(clause.name, target.name)
            if result is not None and result.outcome is not ClauseOutcome.PASSED and result.reason:
                numbered.setdefault(result.reason, len(numbered) + 1)
    return [(n, reason) for reason, n in numbered.items()]


def _cell(
    run: ConformanceRun, clause: str, target: Target, note_of: dict[str, int]
) -> tuple[str, ClauseOutcome | None]:
    """A matrix cell's label (outcome plus the number of its reason note) and its outcome ("-", None when
    the clause did not run there)."""
    result = run.result(clause, target.name)
    if result is None:
        return "-", None
    label = _CELL_TEXT[result.outcome]
    if result.outcome is not ClauseOutcome.PASSED and result.reason:
        label += f" [{note_of[result.reason]}]"
    return label, result.outcome


def matrix_table(run: ConformanceRun) -> Table:
    """Rows are clauses, columns backends; a cell shows the outcome and the number of its reason note."""
    note_of = {reason: n for n, reason in notes(run)}
    table = Table(title="storage contract: clause x backend", show_lines=False, header_style="bold")
    table.add_column("clause", no_wrap=True)
    targets = ordered_targets(run)
    for target in targets:
        table.add_column(_heading(target), justify="center", style="dim" if target.peer else None)
    for clause in run.clauses:
        cells: list[Text | str] = [clause.name.removeprefix("test_")]
        for target in targets:
            label, outcome = _cell(run, clause.name, target, note_of)
            cells.append(label if outcome is None else Text(label, style=_CELL_STYLE[outcome]))
        table.add_row(*cells)
    return table


def verdict_lines(run: ConformanceRun) -> list[str]:
    return [run.verdict(t).line() for t in ordered_targets(run)]


def left_out(run: ConformanceRun) -> list[LeftOut]:
    """The surveys of ``run`` that found entries listings leave out, or failed, in the targets' order."""
    order = {t.name: i for i, t in enumerate(ordered_targets(run))}
    return sorted(run.left_out, key=lambda found: order.get(found.target, len(order)))


def left_out_lines(run: ConformanceRun) -> list[str]:
    """One line per judged target whose root holds entries listings leave out (or could not be surveyed);
    none when there are none."""
    return [found.line() for found in left_out(run)]


def overall(run: ConformanceRun) -> str:
    """The run's one-line verdict; a run that did not happen says why."""
    text = _OVERALL[run.status]
    if run.incomplete:
        text = f"INCOMPLETE ({run.incomplete}; results so far: {text})"
    if run.selection:
        text += f" (only the clauses selected by --clauses {run.selection!r})"
    return f"{text}: {run.not_run}" if run.not_run else text


def header_lines(run: ConformanceRun) -> list[str]:
    """What the reader must know before the matrix: the server versions and any compatibility mode."""
    servers = [(n, v) for n, v in run.versions if n != "python" and n not in PACKAGES]
    lines = [f"server {name}: {version}" for name, version in servers]
    lines += [
        f"{target}: compatibility mode {', '.join(modes)} is ON (a workaround for a server bug, declared "
        "in capabilities; this target can only be PARTIAL, never conforming)"
        for target, modes in run.compatibility_modes
        if modes
    ]
    return lines


def evidence(run: ConformanceRun) -> list[ClauseResult]:
    """The results with evidence to show: failing, erroring and inconclusive ones that carry any, judged
    targets first."""
    shown = (ClauseOutcome.FAILED, ClauseOutcome.ERROR, ClauseOutcome.INCONCLUSIVE)
    order = {t.name: i for i, t in enumerate(ordered_targets(run))}
    found = [r for r in run.results if r.outcome in shown and r.evidence]
    return sorted(found, key=lambda r: order.get(r.target, len(order)))


# Evidence longer than this is folded in the console (a CI log): its head, then where it is whole.
FOLD_LINES = 30
FOLD_CHARS = 4000


def fold(text: str, whole_at: str) -> str:
    """``text`` as a log shows it: whole when it has at most ``FOLD_LINES`` lines and ``FOLD_CHARS``
    characters, else its head within both bounds (a line longer than the character bound is cut), then one
    line saying how much is left and where it is whole (``whole_at``, e.g. ``see the report check.md``)."""
    lines = text.splitlines()
    if len(lines) <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return text
    head: list[str] = []
    size = 0
    for line in lines[:FOLD_LINES]:
        if size + len(line) > FOLD_CHARS:
            break
        head.append(line)
        size += len(line) + 1
    if not head:  # a first line longer than the bound: its start
        head = [lines[0][:FOLD_CHARS]]
    shown = "\n".join(head)
    more_lines = len(lines) - len(head)
    return f"{shown}\n... {more_lines} more lines ({len(text) - len(shown)} more characters): {whole_at}"


def evidence_title(result: ClauseResult) -> str:
    return f"{result.clause.removeprefix('test_')} on {result.target} ({_CELL_TEXT[result.outcome]}): {result.reason}"


def to_json(run: ConformanceRun) -> dict[str, Any]:
    """The machine-readable report (format ``storage-adapter-check/1``)."""
    return {
        "format": REPORT_FORMAT,
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "status": run.status.value,
        "not_run": run.not_run or None,
        "complete": not run.incomplete,
        "incomplete": run.incomplete or None,
        "budget_s": run.budget_s or None,
        "selection": run.selection or None,
        "conforms": run.conforms,
        "compatibility_modes": {target: list(modes) for target, modes in run.compatibility_modes if modes},
        "duration_s": round(run.duration_s, 3),
        "sizes": vars(run.sizes),
        "peer_sizes": vars(run.peer_sizes),
        "versions": dict(run.versions),
        "clauses": [{"name": c.name, "summary": c.summary} for c in run.clauses],
        "targets": [
            {
                "name": t.name,
                "url": t.url,
                "factory": t.factory,
                "peer": t.peer,
                "conforms": run.verdict(t).conforms,
                "status": run.verdict(t).status.value,
                "verdict": run.verdict(t).line(),
                "violations": list(run.verdict(t).violations),
                "inconclusive": list(run.verdict(t).inconclusive),
                "duration_s": round(sum(r.duration_s for r in run.results if r.target == t.name), 3),
            }
            for t in ordered_targets(run)
        ],
        # Judged targets whose root holds entries listings leave out (another tool's), or whose survey
        # failed (``error``); information, never part of a verdict.
        "left_out": [
            {
                "target": found.target,
                "count": found.count,
                "entries": [
                    {"name": e.name, "size": e.size, "reason": e.reason.value, "detail": e.detail}
                    for e in found.entries
                ],
                "error": found.error or None,
            }
            for found in left_out(run)
        ],
        "results": [
            {
                "clause": r.clause,
                "target": r.target,
                "outcome": r.outcome.value,
                "reason": r.reason,
                "evidence": r.evidence,
                "duration_s": round(r.duration_s, 3),
                "cases": r.cases,
            }
            for r in run.results
        ],
    }


def md_escape(text: str) -> str:
    """``text`` as one Markdown table cell or list item: pipes escaped, newlines joined."""
    return text.replace("|", "\\|").replace("\n", " ")


def fenced(text: str) -> list[str]:
    """``text`` as a Markdown code block, its fence longer than any run of backticks inside it (evidence
    may quote Markdown)."""
    longest = max((len(ticks) for ticks in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, text, fence]


def markdown_matrix(run: ConformanceRun) -> list[str]:
    """The matrix as a Markdown table (rows clauses, columns targets, cells the outcome and the number of
    its reason note, as :func:`notes` numbers them)."""
    targets = ordered_targets(run)
    note_of = {reason: n for n, reason in notes(run)}
    lines = [
        "| clause | " + " | ".join(t.name + (" (peer)" if t.peer else "") for t in targets) + " |",
        "|---|" + "---|" * len(targets),
    ]
    for clause in run.clauses:
        cells = [_cell(run, clause.name, target, note_of)[0] for target in targets]
        lines.append(f"| {clause.name.removeprefix('test_')} | " + " | ".join(cells) + " |")
    return lines


def to_markdown(run: ConformanceRun) -> str:
    targets = ordered_targets(run)
    lines = [
        "# storage-adapter check",
        "",
        f"Overall: **{md_escape(overall(run))}** (peers are shown for comparison and never judged). "
        f"Duration {run.duration_s:.1f} s.",
        "",
        *[f"> {md_escape(line)}" for line in header_lines(run)],
        "",
        *[f"- {md_escape(line)}" for line in verdict_lines(run)],
        "",
        *markdown_matrix(run),
    ]
    lines += ["", "## Notes", ""]
    lines += [f"{n}. {md_escape(reason)}" for n, reason in notes(run)] or ["(none)"]
    lines += ["", "## Evidence", ""]
    for result in evidence(run):
        lines += [f"### {md_escape(evidence_title(result))}", "", *fenced(result.evidence), ""]
    if not evidence(run):
        lines += ["(none)"]
    if run.left_out:
        lines += ["", "## Entries listings leave out", ""]
        lines += [
            "Another tool's entries under a judged target's root, which no listing shows (see "
            "docs/listing.md of storage-adapter): information, never part of a verdict.",
            "",
            *fenced("\n".join(left_out_lines(run))),
        ]
    lines += ["", "## Clauses", ""]
    lines += [f"- `{c.name}`: {md_escape(c.summary)}" for c in run.clauses]
    lines += ["", "## Targets", ""]
    lines += [f"- {t.name}{' (peer)' if t.peer else ''}: `{t.url}` via `{t.factory}`" for t in targets]
    lines += ["", "## Sizes and versions", ""]
    lines.append(f"- race sizes: {vars(run.sizes)}; peers: {vars(run.peer_sizes)}")
    lines += [f"- {name}: {version}" for name, version in run.versions]
    return "\n".join(lines) + "\n"


def report_paths(path: str | Path) -> tuple[Path, Path]:
    """``--report PATH``: a directory gets ``storage-adapter-check.{md,json}`` inside it; otherwise PATH
    (with a ``.md`` or ``.json`` suffix dropped) is the stem of both files."""
    path = Path(path)
    stem = path / "storage-adapter-check" if path.is_dir() else path
    if stem.suffix in (".md", ".json"):
        stem = stem.with_suffix("")
    return stem.with_name(stem.name + ".md"), stem.with_name(stem.name + ".json")


def write_report(run: ConformanceRun, path: str | Path) -> tuple[Path, Path]:
    """Write the Markdown and JSON reports; return their paths. Creates the parent directory."""
    md_path, json_path = report_paths(path)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(to_markdown(run), encoding="utf-8")
    json_path.write_text(json.dumps(to_json(run), indent=2) + "\n", encoding="utf-8")
    return md_path, json_path
