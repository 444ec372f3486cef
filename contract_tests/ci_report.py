"""CI-native results of a check: JUnit XML (``check --junit``) and a GitHub step summary (``--summary``).

JUnit: one ``<testsuite>`` per target (judged targets first), one ``<testcase>`` per (clause, target) of the
matrix, ``classname`` the target and ``name`` the clause. CI systems turn a build red on a ``<failure>`` or
an ``<error>`` and never on a ``<skipped>``, so outcomes map by what the check itself counts as a violation:

==============  =================================================================================
pass            a bare testcase
fail            ``<failure type="fail" message=REASON>`` with the whole evidence as text
error           ``<error type="error" message=REASON>`` (the clause could not run: a violation too)
skip            ``<skipped message="SKIP: REASON">``
not-run         ``<skipped message="NOT RUN: WHY">`` (the budget ran out, or a signal stopped the run)
inconclusive    ``<skipped message="INCONCLUSIVE: REASON">`` with the evidence as text, and the clause
                named in its suite's ``inconclusive`` property. Never a violation (the referee could
                not decide within its bound, and never claims what it did not find), so it must not
                turn CI red; yet not a pass, so it must not vanish among the passes either. JUnit has
                no third state: a skip whose message starts with INCONCLUSIVE is what a reader of any
                CI's test view sees, and the property lets a tool count them (in the schemas CI
                systems use, a testcase has no properties and a skipped element no type).
a peer's fail   ``<skipped message="PEER, NOT JUDGED: FAIL: REASON">``: peers are shown for comparison
or error        and never judged; their failures must not fail a build the check passes.
==============  =================================================================================

Every suite's ``<properties>`` carry the run's overall status, the versions, the sizes and the budget, and
``incomplete`` when a signal stopped the run; a judged target's suite also ``left_out`` when its root holds
entries listings leave out (another tool's: docs/listing.md) or could not be surveyed; a run that could not start (or whose judged target answered
nothing) adds a suite ``storage-adapter check`` whose one testcase is an ``<error>`` saying why (a
``<skipped>`` when ``--allow-unavailable`` accepted a server that cannot run here). The file validates
against the JUnit schema of Jenkins (tests/data/junit.xsd).

The step summary is GitHub-flavoured Markdown, short: the overall line, the verdict lines, the clauses that
did not pass on judged targets with their reasons, their evidence folded in ``<details>`` (long evidence cut
as in the console, saying where it is whole), the entries listings leave out folded likewise (only when a
judged root holds any), and the matrix with its numbered reasons folded likewise.
"""

from __future__ import annotations

import html
import re
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from xml.etree import ElementTree as ET

from contract_tests.conformance import ClauseOutcome, ClauseResult, ConformanceRun
from contract_tests.report import (
    evidence_title,
    fenced,
    fold,
    header_lines,
    left_out,
    left_out_lines,
    markdown_matrix,
    md_escape,
    notes,
    ordered_targets,
    overall,
    verdict_lines,
)
from contract_tests.targets import Target

RUN_SUITE = "storage-adapter check"  # the suite of a run that did not happen, and every suite's package
_SKIPPED_LABEL = {
    ClauseOutcome.SKIPPED: "SKIP",
    ClauseOutcome.NOT_RUN: "NOT RUN",
    ClauseOutcome.INCONCLUSIVE: "INCONCLUSIVE",
}
# XML 1.0 cannot carry these characters at all, not even escaped; evidence may hold them (a key of the
# invalid-key clauses, a body a store answered), so they are written as Python escapes instead.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _not_run_reason(result: ClauseResult) -> str:
    return result.reason.removeprefix("not run: ")


def _verdict_element(result: ClauseResult, judged: bool) -> ET.Element | None:
    """The child of a result's testcase: failure, error or skipped (None for a pass)."""
    outcome = result.outcome
    if outcome is ClauseOutcome.PASSED:
        return None
    text = result.evidence or result.reason
    if outcome.is_violation and judged:
        tag = "failure" if outcome is ClauseOutcome.FAILED else "error"
        element = ET.Element(tag, type=outcome.value, message=_xml_text(result.reason))
    elif outcome.is_violation:
        label = "FAIL" if outcome is ClauseOutcome.FAILED else "ERROR"
        message = f"PEER, NOT JUDGED: {label}: {result.reason}"
        element = ET.Element("skipped", message=_xml_text(message))
    else:
        reason = _not_run_reason(result) if outcome is ClauseOutcome.NOT_RUN else result.reason
        message = f"{_SKIPPED_LABEL[outcome]}: {reason}"
        element = ET.Element("skipped", message=_xml_text(message))
        text = result.evidence
    if text:
        element.text = _xml_text(text)
    return element


def _testcase(result: ClauseResult, judged: bool) -> ET.Element:
    case = ET.Element(
        "testcase",
        classname=result.target,
        name=result.clause.removeprefix("test_"),
        time=f"{result.duration_s:.3f}",
    )
    verdict = _verdict_element(result, judged)
    if verdict is not None:
        case.append(verdict)
    return case


def _run_properties(run: ConformanceRun, peer: bool) -> list[tuple[str, str]]:
    sizes = run.peer_sizes if peer else run.sizes
    found = [
        ("status", run.status.value),
        ("overall", overall(run)),
        ("complete", str(not run.incomplete).lower()),
    ]
    found += [("incomplete", run.incomplete)] if run.incomplete else []
    found += [("not_run", run.not_run)] if run.not_run else []
    found += [("selection", run.selection)] if run.selection else []
    found += [("budget_s", f"{run.budget_s:g}"), ("duration_s", f"{run.duration_s:.3f}")]
    found += [(f"sizes.{name}", str(value)) for name, value in vars(sizes).items()]
    found += [(f"version.{name}", version) for name, version in run.versions]
    return found


def _target_properties(run: ConformanceRun, target: Target) -> list[tuple[str, str]]:
    verdict = run.verdict(target)
    found = [("target.url", target.url)] if target.url else []
    found += [
        ("target.factory", target.factory),
        ("judged", str(not target.peer).lower()),
        ("verdict", verdict.line()),
    ]
    if verdict.compatibility_modes:
        found.append(("compatibility_modes", ", ".join(verdict.compatibility_modes)))
    if verdict.inconclusive:
        found.append(("inconclusive", ", ".join(c.removeprefix("test_") for c in verdict.inconclusive)))
    found += [("left_out", survey.line()) for survey in left_out(run) if survey.target == target.name]
    return found


def _suite(
    name: str, index: int, started: str, properties: list[tuple[str, str]], cases: list[ET.Element]
) -> ET.Element:
    children = [list(case) for case in cases]
    counts = {
        tag: sum(1 for c in children if c and c[0].tag == tag) for tag in ("failure", "error", "skipped")
    }
    seconds = sum(float(case.get("time", "0")) for case in cases)
    suite = ET.Element(
        "testsuite",
        name=name,
        tests=str(len(cases)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{seconds:.3f}",
        timestamp=started,
        hostname=socket.gethostname() or "localhost",
        id=str(index),
        package=RUN_SUITE,
    )
    listed = ET.SubElement(suite, "properties")
    for key, value in properties:
        ET.SubElement(listed, "property", name=key, value=_xml_text(value))
    suite.extend(cases)
    ET.SubElement(suite, "system-out")
    ET.SubElement(suite, "system-err")
    return suite


def to_junit(run: ConformanceRun, *, unavailable_allowed: bool = False) -> str:
    """The JUnit XML document of ``run`` (see the module's docstring for the mapping). With
    ``unavailable_allowed`` a run that did not happen is a skipped testcase, not an error (``check
    --allow-unavailable`` accepted it)."""
    # The suites' start, in UTC without a zone: the form every JUnit schema accepts.
    started = (datetime.now(UTC) - timedelta(seconds=run.duration_s)).strftime("%Y-%m-%dT%H:%M:%S")
    root = ET.Element("testsuites")
    if run.not_run:
        case = ET.Element("testcase", classname=RUN_SUITE, name="run", time=f"{run.duration_s:.3f}")
        if unavailable_allowed:
            ET.SubElement(case, "skipped", message=_xml_text(f"SKIPPED: {run.not_run}"))
        else:
            ET.SubElement(case, "error", type="not-run", message=_xml_text(f"NOT RUN: {run.not_run}"))
        root.append(_suite(RUN_SUITE, len(root), started, _run_properties(run, peer=False), [case]))
    for target in ordered_targets(run):
        results = [r for r in (run.result(c.name, target.name) for c in run.clauses) if r is not None]
        if not results:  # a target of a run that never reached it: the run's own suite says why
            continue
        cases = [_testcase(result, judged=not target.peer) for result in results]
        properties = _run_properties(run, target.peer) + _target_properties(run, target)
        root.append(_suite(target.name, len(root), started, properties, cases))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(run: ConformanceRun, path: str | Path, *, unavailable_allowed: bool = False) -> Path:
    """Write :func:`to_junit` of ``run`` to ``path`` (its parent directory created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_junit(run, unavailable_allowed=unavailable_allowed), encoding="utf-8")
    return path


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{html.escape(summary)}</summary>", "", *body, "", "</details>", ""]


def step_summary(run: ConformanceRun, whole_at: str, *, unavailable_allowed: bool = False) -> str:
    """The GitHub-flavoured Markdown of ``run`` for ``$GITHUB_STEP_SUMMARY`` (see the module's docstring);
    ``whole_at`` says where a folded evidence is whole (a report file, or how to get one)."""
    if run.not_run and not run.results:
        label = "SKIPPED" if unavailable_allowed else "NOT RUN"
        return f"### storage-adapter check: {label}\n\n{md_escape(run.not_run)}\n\n"
    targets = ordered_targets(run)
    judged = sum(1 for t in targets if not t.peer)
    lines = [
        f"### storage-adapter check: {md_escape(overall(run))}",
        "",
        f"{len(run.clauses)} clauses on {judged} judged target(s)"
        + (f" and {len(targets) - judged} peer(s), never judged" if len(targets) > judged else "")
        + f"; checked in {run.duration_s:.0f} s.",
        "",
        *[f"> {md_escape(line)}" for line in header_lines(run)],
        *[f"- {md_escape(line)}" for line in verdict_lines(run)],
        "",
    ]
    peers = {t.name for t in targets if t.peer}
    shown = (ClauseOutcome.FAILED, ClauseOutcome.ERROR, ClauseOutcome.INCONCLUSIVE)
    failing = [r for r in run.results if r.target not in peers and r.outcome in shown]
    unreached: dict[tuple[str, str], int] = {}
    for result in run.results:
        if result.target not in peers and result.outcome is ClauseOutcome.NOT_RUN:
            key = (result.target, _not_run_reason(result))
            unreached[key] = unreached.get(key, 0) + 1
    if failing:
        lines += ["| clause | target | outcome | reason |", "|---|---|---|---|"]
        lines += [
            f"| {r.clause.removeprefix('test_')} | {md_escape(r.target)} | {r.outcome.value.upper()} | "
            f"{md_escape(r.reason)} |"
            for r in failing
        ]
        lines.append("")
    lines += [
        f"- {count} clause(s) not run on {md_escape(t)}: {md_escape(why)}"
        for (t, why), count in unreached.items()
    ]
    lines += [""] if unreached else []
    for result in failing:
        if result.evidence:
            lines += _details(f"evidence: {evidence_title(result)}", fenced(fold(result.evidence, whole_at)))
    if run.left_out:
        title = f"entries listings leave out (another tool's) on {len(run.left_out)} target(s)"
        lines += _details(title, fenced("\n".join(left_out_lines(run))))
    matrix = [*markdown_matrix(run), "", *[f"{n}. {md_escape(reason)}" for n, reason in notes(run)]]
    lines += _details(f"the matrix: {len(run.clauses)} clauses x {len(targets)} targets", matrix)
    return "\n".join(lines)


def append_step_summary(
    run: ConformanceRun, path: str | Path, whole_at: str, *, unavailable_allowed: bool = False
) -> Path:
    """Append :func:`step_summary` of ``run`` to ``path`` (GitHub gives each step one file, to append to);
    return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as summary:
        summary.write(step_summary(run, whole_at, unavailable_allowed=unavailable_allowed))
    return path
