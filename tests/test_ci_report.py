"""CI-native results of `storage-adapter check` (issue 30, item 4): JUnit XML (``--junit``) whose counts are
the matrix's and which validates against the JUnit schema CI systems use (tests/data/junit.xsd), a short
GitHub step summary (``--summary``, else ``$GITHUB_STEP_SUMMARY``), both written in every case; and long
evidence folded in the console, whole in every file (item 5).

Most tests run a tiny suite through ``run_contract`` (a pass, a fail with long evidence, an inconclusive, a
skip and an error, on a judged target and a peer); the CLI tests run one cheap clause, or none.
"""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
import uuid
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import xmlschema
from rich.console import Console

from contract_tests import cli
from contract_tests.ci_report import RUN_SUITE, step_summary, to_junit, write_junit
from contract_tests.conformance import ClauseOutcome, ConformanceRun, Target, not_run, run_contract
from contract_tests.report import FOLD_CHARS, FOLD_LINES, fenced, fold, to_json, to_markdown

REPO = Path(__file__).resolve().parent.parent
SCHEMA = xmlschema.XMLSchema(REPO / "tests" / "data" / "junit.xsd")
LONG_EVIDENCE = "\n".join(f"op {i}: write_if_match('k', b'v{i}') -> None" for i in range(50))
SUITE = f'''
import pytest
from contract_tests.verdicts import Inconclusive, Violation

LONG_EVIDENCE = {LONG_EVIDENCE!r}


@pytest.fixture
def broken():
    raise RuntimeError("the fixture broke")


class TestCi:
    def test_passes(self, storage_contract_adapter):
        """Bytes round-trip."""
        storage_contract_adapter.write("k", b"v")
        assert storage_contract_adapter.read_bytes("k") == b"v"

    def test_fails(self, storage_contract_adapter):
        raise Violation("the history is not linearizable", LONG_EVIDENCE)

    def test_undecided(self, storage_contract_adapter):
        raise Inconclusive("the search ran out of its 0 s budget", "key 'k': unknown (12 ops)")

    def test_skips(self, storage_contract_adapter):
        pytest.skip("memory stores are per-process")

    def test_cannot_run(self, storage_contract_adapter, broken):
        pass
'''
PEER = "contract_tests.peers:open_peer"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ConformanceRun:
    # A unique module name: run_contract runs pytest in this process, where modules stay imported.
    path = tmp_path_factory.mktemp("suite") / f"test_ci_{uuid.uuid4().hex[:8]}.py"
    path.write_text(SUITE)
    targets = [
        Target("memory", f"memory://ci-{uuid.uuid4().hex[:8]}"),
        Target("fsspec-memory", f"memory://ci-peer-{uuid.uuid4().hex[:8]}", factory=PEER, peer=True),
    ]
    return run_contract(targets, suite=(str(path),))


def _valid(document: str) -> ET.Element:
    SCHEMA.validate(document)
    return ET.fromstring(document)


def _suites(root: ET.Element) -> dict[str, ET.Element]:
    return {suite.get("name", ""): suite for suite in root.iter("testsuite")}


def _properties(suite: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}


def _verdicts(suite: ET.Element) -> dict[str, ET.Element | None]:
    """testcase name -> its one child (failure, error or skipped), None for a pass."""
    return {case.get("name", ""): next(iter(case), None) for case in suite.iter("testcase")}


def test_the_tiny_suite_has_every_outcome(run: ConformanceRun) -> None:
    outcomes = {(r.target, r.clause.removeprefix("test_")): r.outcome for r in run.results}
    assert outcomes == {
        (target, clause): outcome
        for target in ("memory", "fsspec-memory")
        for clause, outcome in [
            ("passes", ClauseOutcome.PASSED),
            ("fails", ClauseOutcome.FAILED),
            ("undecided", ClauseOutcome.INCONCLUSIVE),
            ("skips", ClauseOutcome.SKIPPED),
            ("cannot_run", ClauseOutcome.ERROR),
        ]
    }


def test_junit_counts_are_the_matrix_and_the_file_validates(run: ConformanceRun) -> None:
    root = _valid(to_junit(run))
    suites = _suites(root)
    assert list(suites) == ["memory", "fsspec-memory"]  # one suite per target, judged first
    for target in run.targets:
        mine = [r for r in run.results if r.target == target.name]
        count = {o: sum(1 for r in mine if r.outcome is o) for o in ClauseOutcome}
        suite = suites[target.name]
        judged = not target.peer
        assert int(suite.get("tests", "")) == len(mine) == len(list(suite.iter("testcase")))
        assert int(suite.get("failures", "")) == (count[ClauseOutcome.FAILED] if judged else 0)
        assert int(suite.get("errors", "")) == (count[ClauseOutcome.ERROR] if judged else 0)
        skipped = (
            count[ClauseOutcome.SKIPPED] + count[ClauseOutcome.NOT_RUN] + count[ClauseOutcome.INCONCLUSIVE]
        )
        if not judged:  # a peer's failures are never violations: they must not turn a build red
            skipped += count[ClauseOutcome.FAILED] + count[ClauseOutcome.ERROR]
        assert int(suite.get("skipped", "")) == skipped
        assert {case.get("classname") for case in suite.iter("testcase")} == {target.name}
        assert float(suite.get("time", "")) == pytest.approx(sum(r.duration_s for r in mine), abs=0.01)


def test_junit_carries_reasons_and_the_whole_evidence(run: ConformanceRun) -> None:
    suites = _suites(_valid(to_junit(run)))
    judged = _verdicts(suites["memory"])
    assert judged["passes"] is None
    failure = judged["fails"]
    assert failure is not None and failure.tag == "failure"
    assert failure.get("message") == "the history is not linearizable"
    assert failure.text == LONG_EVIDENCE  # whole: 50 lines, no fold
    error = judged["cannot_run"]
    assert error is not None and error.tag == "error"
    assert "the fixture broke" in error.get("message", "")
    skipped = judged["skips"]
    assert skipped is not None and skipped.tag == "skipped"
    assert skipped.get("message") == "SKIP: memory stores are per-process"
    undecided = judged["undecided"]
    assert undecided is not None and undecided.tag == "skipped"
    assert undecided.get("message") == "INCONCLUSIVE: the search ran out of its 0 s budget"
    assert undecided.text == "key 'k': unknown (12 ops)"
    properties = _properties(suites["memory"])
    assert properties["inconclusive"] == "undecided"
    assert properties["status"] == "violations" and properties["judged"] == "true"
    assert properties["complete"] == "true" and "incomplete" not in properties
    assert properties["version.python"] and properties["version.pytest"]
    assert properties["sizes.threads"] == str(run.sizes.threads)
    assert properties["verdict"].startswith("memory: VIOLATES 2 clause(s)")
    peer = _verdicts(suites["fsspec-memory"])["fails"]
    assert peer is not None and peer.tag == "skipped"
    assert peer.get("message") == "PEER, NOT JUDGED: FAIL: the history is not linearizable"
    assert _properties(suites["fsspec-memory"])["judged"] == "false"


def test_a_run_that_could_not_start_is_one_error_testcase(run: ConformanceRun) -> None:
    reason = "ServerCannotRun: minio: minio needs Docker: no Docker engine reachable"
    failed = not_run(list(run.targets), reason)
    (suite,) = _valid(to_junit(failed)).iter("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("errors")) == (RUN_SUITE, "1", "1")
    error = _verdicts(suite)["run"]
    assert error is not None and error.tag == "error" and error.get("message") == f"NOT RUN: {reason}"
    assert _properties(suite)["not_run"] == reason
    (suite,) = _valid(to_junit(failed, unavailable_allowed=True)).iter("testsuite")
    skipped = _verdicts(suite)["run"]  # --allow-unavailable: exit 0, so CI must not go red either
    assert skipped is not None and skipped.tag == "skipped" and suite.get("errors") == "0"


def test_an_incomplete_run_says_so_and_what_was_not_run(run: ConformanceRun) -> None:
    why = "stopped by SIGTERM after 40 s"
    results = tuple(
        dataclasses.replace(r, outcome=ClauseOutcome.NOT_RUN, reason=f"not run: {why}", evidence="")
        if r.clause == "test_passes"
        else r
        for r in run.results
    )
    stopped = dataclasses.replace(run, results=results, incomplete=why)
    suites = _suites(_valid(to_junit(stopped)))
    assert _properties(suites["memory"])["incomplete"] == why
    assert _properties(suites["memory"])["complete"] == "false"
    unreached = _verdicts(suites["memory"])["passes"]
    assert unreached is not None and unreached.tag == "skipped"
    assert unreached.get("message") == f"NOT RUN: {why}"


def test_characters_xml_cannot_carry_are_escaped(run: ConformanceRun) -> None:
    results = tuple(
        dataclasses.replace(r, reason="key 'a\x00b' accepted", evidence="\x1b[31m\ud800 and \x85 kept")
        if r.clause == "test_fails"
        else r
        for r in run.results
    )
    failure = _verdicts(_suites(_valid(to_junit(dataclasses.replace(run, results=results))))["memory"])[
        "fails"
    ]
    assert failure is not None
    assert failure.get("message") == "key 'a\\x00b' accepted"
    assert failure.text == "\\x1b[31m\\ud800 and \x85 kept"


def test_the_step_summary_is_short_and_folds_the_evidence(run: ConformanceRun) -> None:
    summary = step_summary(run, "see the report r.md")
    lines = summary.splitlines()
    assert lines[0] == "### storage-adapter check: VIOLATIONS"
    assert (
        "- memory: VIOLATES 2 clause(s) - 1 passed, 1 skipped, 1 inconclusive; fails, cannot_run; inconclusive: undecided"
        in lines
    )
    assert "| fails | memory | FAIL | the history is not linearizable |" in lines
    assert any(line.startswith("| cannot_run | memory | ERROR | setup error: ") for line in lines)
    assert "| undecided | memory | INCONCLUSIVE | the search ran out of its 0 s budget |" in lines
    assert not any(line.startswith("| fails | fsspec-memory") for line in lines)  # peers: in the matrix only
    assert summary.count("<details>") == 3  # the evidence of fails and undecided, and the matrix
    assert "1. the history is not linearizable" in lines  # the reason notes of the matrix cells
    assert f"... {50 - FOLD_LINES} more lines (" in summary and "): see the report r.md" in summary
    assert "| fails | FAIL [1] | FAIL [1] |" in lines  # the matrix
    assert len(lines) < 100


def test_a_run_that_could_not_start_has_a_one_line_summary(run: ConformanceRun) -> None:
    failed = not_run(list(run.targets), "ServerCannotRun: minio: needs Docker")
    assert (
        step_summary(failed, "")
        == "### storage-adapter check: NOT RUN\n\nServerCannotRun: minio: needs Docker\n\n"
    )
    assert step_summary(failed, "", unavailable_allowed=True).startswith(
        "### storage-adapter check: SKIPPED\n"
    )


@pytest.mark.parametrize(
    ("text", "head_lines", "more"),
    [
        ("one\ntwo", 2, None),
        ("\n".join(["x"] * FOLD_LINES), FOLD_LINES, None),
        ("\n".join(["x"] * (FOLD_LINES + 5)), FOLD_LINES, "... 5 more lines (10 more characters): see r.md"),
        ("\n".join(["y" * 999] * 10), 4, "... 6 more lines (6000 more characters): see r.md"),
        ("z" * (FOLD_CHARS + 10), 1, "... 0 more lines (10 more characters): see r.md"),
    ],
    ids=["short", "at-the-line-bound", "lines", "characters", "one-long-line"],
)
def test_fold_keeps_the_head_and_says_where_the_rest_is(text: str, head_lines: int, more: str | None) -> None:
    folded = fold(text, "see r.md")
    if more is None:
        assert folded == text
        return
    *head, tail = folded.splitlines()
    assert tail == more
    assert len(head) == head_lines and len("\n".join(head)) <= FOLD_CHARS
    assert text.startswith("\n".join(head))


def test_the_console_folds_long_evidence_the_reports_keep_it_whole(run: ConformanceRun) -> None:
    out = io.StringIO()
    cli._print_run(run, Console(file=out, width=200), "see the report results/check.md")
    printed = out.getvalue()
    assert "op 29: write_if_match" in printed and "op 30: write_if_match" not in printed
    assert "... 20 more lines (" in printed and "): see the report results/check.md" in printed
    assert LONG_EVIDENCE in to_markdown(run)
    assert LONG_EVIDENCE in {row["evidence"] for row in to_json(run)["results"]}
    assert LONG_EVIDENCE in to_junit(run).replace("&gt;", ">").replace("&apos;", "'")


def _check(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contract_tests", "check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=cwd,
    )


def test_cli_writes_junit_and_appends_to_the_github_step_summary(tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    result = _check(
        "memory://ci",
        "--no-peers",
        "--clauses",
        "round_trip_bytes",
        "--junit",
        "out/junit.xml",
        env={"GITHUB_STEP_SUMMARY": str(summary)},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (suite,) = _valid((tmp_path / "out" / "junit.xml").read_text()).iter("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("memory:ci", "1", "0")
    text = summary.read_text()
    assert text.startswith("earlier step\n### storage-adapter check: conforms (only the clauses selected")
    assert "- memory:ci: conforms - 1 passed, 0 skipped" in text


def test_cli_writes_junit_and_summary_when_the_check_cannot_start(tmp_path: Path) -> None:
    """Bad input (exit 2) and a server that cannot run here (exit 3, or 0 with --allow-unavailable): the
    JUnit file has one testcase saying why, an error unless the run was allowed not to happen."""
    no_docker = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    cases = [
        (["ftp://bucket/x"], {}, 2, "error", "NOT RUN: InputError: unsupported storage URL"),
        (["--server", "minio"], no_docker, 3, "error", "NOT RUN: ServerCannotRun: minio: minio needs Docker"),
        (
            ["--server", "minio", "--allow-unavailable"],
            no_docker,
            0,
            "skipped",
            "SKIPPED: ServerCannotRun: minio",
        ),
    ]
    for args, env, code, tag, message in cases:
        junit, summary = tmp_path / f"{code}.xml", tmp_path / f"{code}.md"
        result = _check(*args, "--junit", str(junit), "--summary", str(summary), env=env, cwd=tmp_path)
        assert result.returncode == code, result.stdout + result.stderr
        assert len((result.stdout + result.stderr).strip().splitlines()) == 1  # still one line
        (suite,) = _valid(junit.read_text()).iter("testsuite")
        verdict = _verdicts(suite)["run"]
        assert verdict is not None and verdict.tag == tag
        assert verdict.get("message", "").startswith(message)
        heading = "SKIPPED" if tag == "skipped" else "NOT RUN"
        assert summary.read_text().startswith(f"### storage-adapter check: {heading}\n")


def test_an_unwritable_junit_path_is_an_error_not_a_silent_loss(run: ConformanceRun, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        write_junit(run, tmp_path / "file" / "junit.xml")


def test_evidence_quoting_markdown_keeps_its_code_block() -> None:
    assert fenced("a ``` b") == ["````", "a ``` b", "````"]
    assert fenced("plain") == ["```", "plain", "```"]
